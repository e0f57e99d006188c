// Rill console: a topic's page. Partitions with their sizes and segments, retention and the
// other effective settings, editing, purging and deleting, adding and removing partitions,
// consumer groups, every stored consumer offset with its lag, and a test-message form.

import { api, seg, toBase64 } from './api.js';
import { checks, confirmDialog, fmtBytes, fmtDuration, fmtNumber, fmtTime, form, h, notice, replace, table } from './dom.js';
import { topicForm } from './streams.js';

/** The partitioning of a send: a partition id as its 4 little-endian bytes, or a key. */
function partitioning(partition, key) {
  if (key) return { kind: 'messages_key', value: toBase64(new TextEncoder().encode(key)) };
  if (partition === '') return { kind: 'balanced', value: '' };
  const bytes = new Uint8Array(4);
  new DataView(bytes.buffer).setUint32(0, Number(partition), true);
  return { kind: 'partition_id', value: toBase64(bytes) };
}

/** `key=value` lines as string user headers. */
function headerLines(text) {
  const encode = (value) => toBase64(new TextEncoder().encode(value));
  return text.split('\n').map((line) => line.trim()).filter(Boolean).map((line) => {
    const at = line.indexOf('=');
    return { key: { kind: 'string', value: encode(line.slice(0, at)) }, value: { kind: 'string', value: encode(line.slice(at + 1)) } };
  });
}

export function sendForm(base, partitionsCount, onSent) {
  return form('send-message', [
    { name: 'partition', label: 'Partition (empty: balanced)', value: '0',
      check: (v) => (v !== '' && (!/^\d+$/.test(v) || Number(v) >= partitionsCount) ? `Partition must be between 0 and ${partitionsCount - 1}` : '') },
    { name: 'key', label: 'Message key (optional, overrides the partition)' },
    { name: 'id', label: 'Message id (optional, decimal)', check: (v) => (v && !/^\d{1,39}$/.test(v) ? 'Message id must be a decimal number' : '') },
    { name: 'payload', label: 'Payload', type: 'textarea', required: true, placeholder: '{"hello": "rill"}' },
    { name: 'headers', label: 'User headers (key=value, one per line)', type: 'textarea', rows: 2,
      check: (v) => (v.split('\n').some((l) => l.trim() && !/^[^=]+=/.test(l.trim())) ? 'Each header line must be key=value' : '') },
  ], 'Send message', async (values, node) => {
    const message = { payload: toBase64(new TextEncoder().encode(values.payload)) };
    const headers = headerLines(values.headers);
    if (headers.length) message.user_headers = headers;
    let body = JSON.stringify({ partitioning: partitioning(values.partition, values.key), messages: [{ ...message, id: '__ID__' }] });
    // Ids are u128: written as digits into the JSON, past what a JS number holds.
    body = body.replace('"__ID__"', values.id || '0');
    await api('POST', `${base}/messages`, body);
    node.querySelector('textarea[name=payload]').value = '';
    onSent();
  });
}

function partitionTable(base, topic) {
  return table([
    ['Partition', (p) => String(p.id)],
    ['Messages', (p) => fmtNumber(p.messages_count)],
    ['Size', (p) => fmtBytes(p.size)],
    ['Segments', (p) => fmtNumber(p.segments_count)],
    ['Next offset', (p) => (Number(p.messages_count) ? fmtNumber(Number(p.current_offset) + 1) : '0')],
    ['Created', (p) => fmtTime(p.created_at)],
    ['', (p) => h('a', { href: `#${base}/messages?partition=${p.id}&kind=last`, class: 'browse-link' }, 'Browse')],
  ], topic.partitions || [], { class: 'partitions-table' });
}

function settingsTable(topic) {
  const rows = [
    ['Message expiry', fmtDuration(topic.message_expiry)],
    ['Max topic size', Number(topic.max_topic_size) ? fmtBytes(topic.max_topic_size) : 'server default'],
    ['Compression', topic.compression_algorithm],
    ...Object.entries(topic.options || {}).map(([key, option]) =>
      [key, `${option.value}${option.explicit ? '' : ' (default)'}`]),
  ];
  return table([['Setting', (r) => r[0]], ['Value', (r) => r[1]]], rows, { class: 'settings-table' });
}

function offsetsTable(offsets, groups) {
  const groupName = new Map(groups.map((g) => [g.id, g.name]));
  return table([
    ['Kind', (o) => (o.kind === 'consumer_group' ? 'group' : 'consumer')],
    ['Consumer', (o) => (o.kind === 'consumer_group' ? `${groupName.get(o.consumer_id) ?? '?'} (${o.consumer_id})` : String(o.consumer_id))],
    ['Partition', (o) => String(o.partition_id)],
    ['Stored offset', (o) => fmtNumber(o.stored_offset)],
    ['Lag', (o) => fmtNumber(o.lag)],
  ], offsets, { class: 'offsets-table' });
}

async function actions(base, topic, message) {
  const run = async (question, confirmLabel, method, path, done) => {
    if (question && !(await confirmDialog(question, confirmLabel))) return;
    try {
      await api(method, path);
      done();
    } catch (error) {
      replace(message, notice('error', error.message));
    }
  };
  const reload = () => location.reload();
  const addPartitions = form('add-partitions', [{ name: 'partitions_count', label: 'Partitions to add', value: '1',
    required: true, check: checks.whole('Partitions to add', 1, 1000) }], 'Add partitions', async (values) => {
    await api('POST', `${base}/partitions`, { partitions_count: Number(values.partitions_count) });
    reload();
  });
  return h('div', {}, addPartitions, h('div', { class: 'actions' },
    h('button', { type: 'button', class: 'secondary', id: 'remove-partition', onclick: () => run(
      `Remove the last partition of “${topic.name}” and its messages?`, 'Remove', 'DELETE',
      `${base}/partitions?partitions_count=1`, reload) }, 'Remove last partition'),
    h('button', { type: 'button', class: 'secondary', id: 'purge-topic', onclick: () => run(
      `Purge every message of topic “${topic.name}”?`, 'Purge', 'DELETE', `${base}/purge`, reload) }, 'Purge messages'),
    h('button', { type: 'button', class: 'danger', id: 'delete-topic', onclick: () => run(
      `Delete topic “${topic.name}” with all its messages?`, 'Delete', 'DELETE', base,
      () => { location.hash = `#${base.replace(/\/topics\/.*/, '')}`; }) }, 'Delete topic')));
}

export async function topicPage(ctx) {
  const [streamId, topicId] = ctx.params;
  const path = `/streams/${seg(streamId)}/topics/${seg(topicId)}`;
  const [stream, topic] = await Promise.all([api('GET', `/streams/${seg(streamId)}`), api('GET', path)]);
  const base = `/streams/${stream.id}/topics/${topic.id}`;
  const message = h('div', { id: 'topic-message' });
  const groupsBlock = h('div', { id: 'groups' });
  const offsetsBlock = h('div', { id: 'offsets' });
  const loadGroups = async () => {
    try {
      const [groups, stored] = await Promise.all([api('GET', `${base}/consumer-groups`), api('GET', `${base}/stored-offsets`)]);
      replace(groupsBlock, groups.length ? table([
        ['Group', (g) => h('a', { href: `#${base}/groups/${g.id}`, class: 'group-link' }, g.name)],
        ['Members', (g) => fmtNumber(g.members_count)],
        ['Partitions', (g) => fmtNumber(g.partitions_count)],
      ], groups) : h('p', { class: 'empty', text: 'No consumer groups.' }));
      replace(offsetsBlock, stored.offsets.length ? offsetsTable(stored.offsets, groups) : h('p', { class: 'empty', text: 'No stored offsets.' }));
    } catch (error) {
      replace(groupsBlock, notice('error', error.message));
    }
  };
  const createGroup = form('create-group', [{ name: 'name', label: 'Group name', required: true, check: checks.name }],
    'Create group', async (values) => {
      await api('POST', `${base}/consumer-groups`, { name: values.name });
      await loadGroups();
    });
  const edit = topicForm('edit-topic', topic, 'Save settings', async (body) => {
    await api('PUT', base, body);
    location.reload();
  });
  const send = sendForm(base, topic.partitions_count, () => replace(message, notice('ok', 'Message sent.')));
  replace(ctx.main,
    h('p', { class: 'crumbs' }, h('a', { href: '#/streams' }, 'Streams'), ' / ',
      h('a', { href: `#/streams/${stream.id}` }, stream.name), ' / ', topic.name),
    h('h2', { id: 'topic-title', text: `Topic ${topic.name}` }),
    h('p', { class: 'meta', text: `id ${topic.id} · ${fmtNumber(topic.messages_count)} messages · ${fmtBytes(topic.size)} · created ${fmtTime(topic.created_at)}` }),
    h('p', {}, h('a', { href: `#${base}/messages?partition=0&kind=first`, class: 'button', id: 'open-browser' }, 'Browse messages')),
    message,
    h('div', { class: 'columns' },
      h('div', { class: 'grow' },
        h('section', { class: 'card' }, h('h3', { text: 'Partitions' }), partitionTable(base, topic)),
        h('section', { class: 'card' }, h('h3', { text: 'Consumer groups' }), groupsBlock, createGroup),
        h('section', { class: 'card' }, h('h3', { text: 'Stored consumer offsets' }), offsetsBlock),
        h('section', { class: 'card' }, h('h3', { text: 'Settings and retention' }), settingsTable(topic))),
      h('div', { class: 'side' },
        h('section', { class: 'card' }, h('h3', { text: 'Send a test message' }), send),
        h('section', { class: 'card' }, h('h3', { text: 'Edit topic' }), edit),
        h('section', { class: 'card' }, h('h3', { text: 'Partitions and data' }), await actions(base, topic, message)))));
  await loadGroups();
  ctx.every(3000, loadGroups);
}
