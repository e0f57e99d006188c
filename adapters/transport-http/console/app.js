// Rill console: the shell. Hash routes to pages, the log-in page, the header, the lost-
// connection banner and the expired-session path (back to log in, then to the same page).

import { api, onConnection, onExpired, saveSession, session } from './api.js';
import { form, h, notice, replace } from './dom.js';
import { overviewPage } from './overview.js';
import { streamPage, streamsPage } from './streams.js';
import { topicPage } from './topic.js';
import { messagesPage } from './messages.js';
import { groupPage } from './groups.js';
import { tokensPage, userPage, usersPage } from './users.js';
import { clientsPage, clusterPage } from './system.js';

const RETURN_KEY = 'rill.return';
const EXPIRED_KEY = 'rill.expired';

const ROUTES = [
  [/^\/?$/, overviewPage, 'Overview'],
  [/^\/streams$/, streamsPage, 'Streams'],
  [/^\/streams\/([^/]+)$/, streamPage, 'Stream'],
  [/^\/streams\/([^/]+)\/topics\/([^/]+)$/, topicPage, 'Topic'],
  [/^\/streams\/([^/]+)\/topics\/([^/]+)\/messages$/, messagesPage, 'Messages'],
  [/^\/streams\/([^/]+)\/topics\/([^/]+)\/groups\/([^/]+)$/, groupPage, 'Consumer group'],
  [/^\/users$/, usersPage, 'Users'],
  [/^\/users\/([^/]+)$/, userPage, 'User'],
  [/^\/tokens$/, tokensPage, 'Access tokens'],
  [/^\/clients$/, clientsPage, 'Clients'],
  [/^\/cluster$/, clusterPage, 'Cluster'],
];

const NAV = [['#/', 'Overview'], ['#/streams', 'Streams'], ['#/users', 'Users'], ['#/tokens', 'Tokens'],
  ['#/clients', 'Clients'], ['#/cluster', 'Cluster']];

const main = document.getElementById('view');
const banner = document.getElementById('connection');
let generation = 0;
let timers = [];
let probing = null;

function stopTimers() {
  for (const timer of timers) clearInterval(timer);
  timers = [];
}

function parseHash() {
  const hash = decodeURIComponent(location.hash.replace(/^#/, '')) || '/';
  const [path, search = ''] = hash.split('?');
  return { path, query: new URLSearchParams(search) };
}

function renderHeader() {
  const user = session();
  const nav = document.getElementById('nav');
  const here = `#${parseHash().path}`;
  replace(nav, user ? NAV.map(([href, label]) => h('a', { href, class: here === href ? 'active' : '' }, label)) : []);
  const who = document.getElementById('who');
  replace(who, user ? [h('span', { id: 'who-name', text: user.username }),
    h('button', { type: 'button', class: 'secondary', id: 'logout', onclick: logout }, 'Log out')] : []);
}

async function logout() {
  try {
    await api('DELETE', '/users/logout');
  } catch {
    // The session ends here whatever the server says.
  }
  saveSession(null);
  sessionStorage.removeItem(RETURN_KEY);
  location.hash = '#/login';
}

function loginPage() {
  const expired = sessionStorage.getItem(EXPIRED_KEY);
  const page = h('section', { class: 'login card' }, h('h2', { text: 'Log in to Rill' }));
  if (expired) page.append(notice('info', 'Your session has expired. Log in again to go back where you were.'));
  page.append(form('login', [
    { name: 'username', label: 'Username', required: true },
    { name: 'password', label: 'Password', type: 'password', required: true },
  ], 'Log in', async (values) => {
    let identity;
    try {
      identity = await api('POST', '/users/login', values, { anonymous: true });
    } catch (error) {
      if (error.code === 'invalid_credentials') error.message = 'Wrong username or password.';
      throw error;
    }
    saveSession({ token: identity.access_token.token, userId: identity.user_id, username: values.username });
    sessionStorage.removeItem(EXPIRED_KEY);
    const back = sessionStorage.getItem(RETURN_KEY);
    sessionStorage.removeItem(RETURN_KEY);
    location.hash = back && !back.startsWith('#/login') ? back : '#/';
  }));
  replace(main, page);
  page.querySelector('input[name=username]').focus();
}

function context(params, query, mine) {
  return {
    params: params.map(decodeURIComponent),
    query,
    main,
    alive: () => mine === generation,
    every(ms, tick) {
      const timer = setInterval(() => {
        if (mine === generation) tick();
      }, ms);
      timers.push(timer);
    },
    /** A page that could not load: its reason in the page (an expired session redirects). */
    fail(error) {
      if (mine !== generation || error.kind === 'expired') return;
      replace(main, h('section', { class: 'card' }, notice('error', error.message || String(error))));
    },
  };
}

async function render() {
  generation += 1;
  const mine = generation;
  stopTimers();
  renderHeader();
  const { path, query } = parseHash();
  if (path === '/login' || !session()) {
    if (path !== '/login') {
      sessionStorage.setItem(RETURN_KEY, location.hash || '#/');
      location.hash = '#/login';
      return;
    }
    loginPage();
    return;
  }
  for (const [pattern, page, title] of ROUTES) {
    const match = pattern.exec(path);
    if (!match) continue;
    document.title = `${title} · Rill`;
    replace(main, h('p', { class: 'loading', text: 'Loading…' }));
    const ctx = context(match.slice(1), query, mine);
    try {
      await page(ctx);
    } catch (error) {
      ctx.fail(error);
    }
    return;
  }
  replace(main, h('section', { class: 'card' }, notice('error', `No page at ${path}.`),
    h('a', { href: '#/' }, 'Back to the overview')));
}

onExpired(() => {
  if (parseHash().path === '/login') return;
  sessionStorage.setItem(RETURN_KEY, location.hash);
  sessionStorage.setItem(EXPIRED_KEY, '1');
  location.hash = '#/login';
});

onConnection((up) => {
  banner.hidden = up;
  if (up || probing) return;
  // Keep knocking until the server answers, then redraw the page that was showing.
  probing = setInterval(async () => {
    try {
      const reply = await fetch('/ping', { cache: 'no-store' });
      if (!reply.ok) return;
      clearInterval(probing);
      probing = null;
      banner.hidden = true;
      render();
    } catch {
      // Still down.
    }
  }, 2000);
});

// A failure no page caught (a timer's, a button's) still shows in the page, never only in
// the browser's console; an expired session or a lost connection has its own path.
function unexpected(reason) {
  if (reason && (reason.kind === 'expired' || reason.kind === 'offline')) return;
  const text = ((reason && reason.message) || String(reason)).replace(/\.+$/, '');
  main.prepend(notice('error', `Something went wrong: ${text}. Reload the page to try again.`));
}
window.addEventListener('unhandledrejection', (event) => unexpected(event.reason));
window.addEventListener('error', (event) => unexpected(event.error || event.message));

window.addEventListener('hashchange', render);
render();
