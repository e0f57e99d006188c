// Rill console: users (list, create with global permissions, a user's page with its
// permissions, status and password), and the logged-in user's personal access tokens.

import { api, seg, session } from './api.js';
import { confirmDialog, fmtTime, form, h, notice, replace, table } from './dom.js';

const GLOBAL = [
  ['manage_servers', 'Manage servers'], ['read_servers', 'Read servers'], ['manage_users', 'Manage users'],
  ['read_users', 'Read users'], ['manage_streams', 'Manage streams'], ['read_streams', 'Read streams'],
  ['manage_topics', 'Manage topics'], ['read_topics', 'Read topics'], ['poll_messages', 'Poll messages'],
  ['send_messages', 'Send messages'],
];

const usernameCheck = (value) => (value.length < 3 || value.length > 50 ? 'Username must be 3 to 50 characters' : '');
const passwordCheck = (value) => (value.length < 3 || value.length > 100 ? 'Password must be 3 to 100 characters' : '');

function permissionFields(permissions) {
  return GLOBAL.map(([name, label]) => ({ name, label, type: 'checkbox', value: permissions?.global?.[name] }));
}

function streamsField(permissions) {
  const streams = permissions?.streams;
  return { name: 'streams', label: 'Per-stream permissions (JSON, optional)', type: 'textarea', rows: 3,
    value: streams ? JSON.stringify(streams, null, 2) : '',
    placeholder: '{"1": {"read_stream": true, "poll_messages": true}}',
    check: (value) => {
      if (!value) return '';
      try {
        const parsed = JSON.parse(value);
        return parsed && typeof parsed === 'object' && !Array.isArray(parsed) ? '' : 'Must be a JSON object keyed by stream id';
      } catch (error) {
        return `Not valid JSON: ${error.message}`;
      }
    } };
}

function permissionsOf(values) {
  const global = Object.fromEntries(GLOBAL.map(([name]) => [name, Boolean(values[name])]));
  return { global, streams: values.streams ? JSON.parse(values.streams) : null };
}

export async function usersPage(ctx) {
  const users = await api('GET', '/users');
  const create = form('create-user', [
    { name: 'username', label: 'Username', required: true, check: usernameCheck },
    { name: 'password', label: 'Password', type: 'password', required: true, check: passwordCheck },
    { name: 'status', label: 'Status', type: 'select', value: 'active', options: [['active', 'active'], ['inactive', 'inactive']] },
    ...permissionFields(null),
    streamsField(null),
  ], 'Create user', async (values) => {
    const user = await api('POST', '/users', {
      username: values.username, password: values.password, status: values.status, permissions: permissionsOf(values),
    });
    location.hash = `#/users/${user.id}`;
  });
  replace(ctx.main, h('h2', { text: 'Users' }), h('div', { class: 'columns' },
    h('section', { class: 'card grow' }, table([
      ['Id', (u) => String(u.id)],
      ['Username', (u) => h('a', { href: `#/users/${u.id}`, class: 'user-link' }, u.username)],
      ['Status', (u) => u.status],
      ['Created', (u) => fmtTime(u.created_at)],
    ], users, { class: 'users-table' })),
    h('section', { class: 'card side' }, h('h3', { text: 'New user' }), create)));
}

export async function userPage(ctx) {
  const [userId] = ctx.params;
  const user = await api('GET', `/users/${seg(userId)}`);
  const message = h('div', { id: 'user-message' });
  const ok = (text) => replace(message, notice('ok', text));
  const permissions = form('user-permissions', [...permissionFields(user.permissions), streamsField(user.permissions)],
    'Save permissions', async (values) => {
      await api('PUT', `/users/${user.id}/permissions`, { permissions: permissionsOf(values) });
      ok('Permissions saved.');
    });
  const details = form('user-details', [
    { name: 'username', label: 'Username', value: user.username, required: true, check: usernameCheck },
    { name: 'status', label: 'Status', type: 'select', value: user.status, options: [['active', 'active'], ['inactive', 'inactive']] },
  ], 'Save', async (values) => {
    await api('PUT', `/users/${user.id}`, values);
    ok('User saved.');
  });
  const password = form('user-password', [
    { name: 'current_password', label: 'Current password', type: 'password', required: true },
    { name: 'new_password', label: 'New password', type: 'password', required: true, check: passwordCheck },
  ], 'Change password', async (values) => {
    await api('PUT', `/users/${user.id}/password`, values);
    ok('Password changed.');
  });
  const remove = h('button', { type: 'button', class: 'danger', id: 'delete-user', onclick: async () => {
    if (!(await confirmDialog(`Delete user “${user.username}”?`))) return;
    try {
      await api('DELETE', `/users/${user.id}`);
      location.hash = '#/users';
    } catch (error) {
      replace(message, notice('error', error.message));
    }
  } }, 'Delete user');
  replace(ctx.main, h('p', { class: 'crumbs' }, h('a', { href: '#/users' }, 'Users'), ' / ', user.username),
    h('h2', { text: `User ${user.username}` }), message,
    h('div', { class: 'columns' },
      h('section', { class: 'card grow' }, h('h3', { text: 'Permissions' }), permissions),
      h('div', { class: 'side' }, h('section', { class: 'card' }, h('h3', { text: 'Account' }), details, password), remove)));
}

export async function tokensPage(ctx) {
  const tokens = await api('GET', '/personal-access-tokens');
  const shown = h('div', { id: 'new-token' });
  const create = form('create-token', [
    { name: 'name', label: 'Token name', required: true, check: (v) => (v.length < 3 || v.length > 30 ? 'Token name must be 3 to 30 characters' : '') },
    { name: 'expiry_h', label: 'Expires after (hours, 0 = never)', value: '0',
      check: (v) => (/^\d+$/.test(v) ? '' : 'Expiry must be a whole number of hours') },
  ], 'Create token', async (values) => {
    const created = await api('POST', '/personal-access-tokens', { name: values.name, expiry: Number(values.expiry_h) * 3600 * 1e6 });
    replace(shown, notice('ok', 'Copy the token now; it is not shown again.'), h('pre', { class: 'token', id: 'token-value', text: created.token }));
  });
  const list = table([
    ['Name', (t) => t.name],
    ['Expires', (t) => (t.expiry_at ? fmtTime(t.expiry_at) : 'never')],
    ['', (t) => h('button', { type: 'button', class: 'danger small', onclick: async () => {
      if (!(await confirmDialog(`Delete token “${t.name}”?`))) return;
      await api('DELETE', `/personal-access-tokens/${seg(t.name)}`).then(() => location.reload(), (error) => replace(shown, notice('error', error.message)));
    } }, 'Delete')],
  ], tokens, { class: 'tokens-table' });
  replace(ctx.main, h('h2', { text: `Personal access tokens of ${session()?.username ?? 'you'}` }),
    h('div', { class: 'columns' }, h('section', { class: 'card grow' }, tokens.length ? list : h('p', { class: 'empty', text: 'No tokens.' })),
      h('section', { class: 'card side' }, h('h3', { text: 'New token' }), create, shown)));
}
