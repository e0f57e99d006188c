// Rill console: streams. The list (filtered and paged in the page, so a thousand streams
// draw as fast as ten), creating one, and a stream's page: its topics, creating a topic,
// renaming, purging and deleting with confirmation.

import { api, seg } from './api.js';
import { checks, confirmDialog, fmtBytes, fmtDuration, fmtNumber, fmtTime, form, h, notice, replace, table } from './dom.js';

export const PAGE_SIZE = 50;

/** A paged, filtered list: `render(rows)` draws one page; returns the block. */
export function pagedList(id, rows, matches, render) {
  let page = 0;
  let filter = '';
  const body = h('div');
  const status = h('span', { class: 'pager-status', id: `${id}-status` });
  const previous = h('button', { type: 'button', class: 'secondary', id: `${id}-previous` }, '‹ Previous');
  const next = h('button', { type: 'button', class: 'secondary', id: `${id}-next` }, 'Next ›');
  const draw = () => {
    const shown = filter ? rows.filter((row) => matches(row, filter)) : rows;
    const pages = Math.max(1, Math.ceil(shown.length / PAGE_SIZE));
    page = Math.min(page, pages - 1);
    const start = page * PAGE_SIZE;
    replace(body, shown.length ? render(shown.slice(start, start + PAGE_SIZE)) : h('p', { class: 'empty', text: 'Nothing here yet.' }));
    status.textContent = shown.length
      ? `${start + 1}–${Math.min(start + PAGE_SIZE, shown.length)} of ${shown.length}` : '0 of 0';
    previous.disabled = page === 0;
    next.disabled = page >= pages - 1;
  };
  previous.addEventListener('click', () => { page -= 1; draw(); });
  next.addEventListener('click', () => { page += 1; draw(); });
  const search = h('input', { type: 'search', placeholder: 'Filter by name or id', id: `${id}-filter` });
  search.addEventListener('input', () => { filter = search.value.trim().toLowerCase(); page = 0; draw(); });
  draw();
  return h('div', { class: 'paged', id }, h('div', { class: 'pager' }, search, previous, status, next), body);
}

export async function streamsPage(ctx) {
  const streams = await api('GET', '/streams');
  streams.sort((a, b) => a.id - b.id);
  const list = pagedList('streams', streams,
    (s, filter) => s.name.toLowerCase().includes(filter) || String(s.id) === filter,
    (rows) => table([
      ['Id', (s) => String(s.id)],
      ['Name', (s) => h('a', { href: `#/streams/${s.id}`, class: 'stream-link' }, s.name)],
      ['Topics', (s) => fmtNumber(s.topics_count)],
      ['Messages', (s) => fmtNumber(s.messages_count)],
      ['Size', (s) => fmtBytes(s.size)],
      ['Created', (s) => fmtTime(s.created_at)],
    ], rows, { class: 'streams-table' }));
  const create = form('create-stream', [
    { name: 'name', label: 'Stream name', required: true, check: checks.name },
  ], 'Create stream', async (values) => {
    const stream = await api('POST', '/streams', { name: values.name });
    location.hash = `#/streams/${stream.id}`;
  });
  replace(ctx.main, h('h2', { text: 'Streams' }),
    h('div', { class: 'columns' }, h('section', { class: 'card grow' }, list),
      h('section', { class: 'card side' }, h('h3', { text: 'New stream' }), create)));
}

function topicForm(id, topic, label, submit) {
  return form(id, [
    { name: 'name', label: 'Topic name', required: true, value: topic?.name, check: checks.name },
    ...(topic ? [] : [{ name: 'partitions_count', label: 'Partitions', value: '1', required: true,
      check: checks.whole('Partitions', 1, 1000) }]),
    { name: 'compression_algorithm', label: 'Compression', type: 'select', value: topic?.compression_algorithm || 'none',
      options: [['none', 'none'], ['gzip', 'gzip']] },
    { name: 'message_expiry_s', label: 'Message expiry (seconds, 0 = server default)',
      value: topic ? String(Math.round(Number(topic.message_expiry) / 1e6)) : '0', check: checks.whole('Message expiry', 0, 2 ** 40) },
    { name: 'max_topic_size', label: 'Max topic size (bytes, 0 = server default)',
      value: topic && !String(topic.max_topic_size).startsWith('1844674407') ? String(topic.max_topic_size) : '0',
      check: checks.whole('Max topic size', 0, Number.MAX_SAFE_INTEGER) },
  ], label, (values) => submit({
    name: values.name,
    partitions_count: Number(values.partitions_count || 0),
    compression_algorithm: values.compression_algorithm,
    message_expiry: Number(values.message_expiry_s || 0) * 1e6,
    max_topic_size: Number(values.max_topic_size || 0),
  }));
}

export { topicForm };

export async function streamPage(ctx) {
  const [streamId] = ctx.params;
  const stream = await api('GET', `/streams/${seg(streamId)}`);
  const topics = stream.topics || [];
  const base = `/streams/${stream.id}`;
  const message = h('div', { id: 'stream-message' });
  const rename = form('rename-stream', [{ name: 'name', label: 'New name', required: true, value: stream.name, check: checks.name }],
    'Rename', async (values) => {
      await api('PUT', base, { name: values.name });
      location.reload();
    });
  const purge = h('button', { type: 'button', class: 'secondary', id: 'purge-stream', onclick: async () => {
    if (!(await confirmDialog(`Purge every message of stream “${stream.name}”? Topics stay.`, 'Purge'))) return;
    try {
      await api('DELETE', `${base}/purge`);
      replace(message, notice('ok', 'Stream purged.'));
    } catch (error) {
      replace(message, notice('error', error.message));
    }
  } }, 'Purge messages');
  const remove = h('button', { type: 'button', class: 'danger', id: 'delete-stream', onclick: async () => {
    if (!(await confirmDialog(`Delete stream “${stream.name}” with all its topics and messages?`))) return;
    try {
      await api('DELETE', base);
      location.hash = '#/streams';
    } catch (error) {
      replace(message, notice('error', error.message));
    }
  } }, 'Delete stream');
  const create = topicForm('create-topic', null, 'Create topic', async (body) => {
    const topic = await api('POST', `${base}/topics`, body);
    location.hash = `#${base}/topics/${topic.id}`;
  });
  const list = pagedList('topics', topics, (t, filter) => t.name.toLowerCase().includes(filter), (rows) => table([
    ['Id', (t) => String(t.id)],
    ['Name', (t) => h('a', { href: `#${base}/topics/${t.id}`, class: 'topic-link' }, t.name)],
    ['Partitions', (t) => fmtNumber(t.partitions_count)],
    ['Messages', (t) => fmtNumber(t.messages_count)],
    ['Size', (t) => fmtBytes(t.size)],
    ['Expiry', (t) => fmtDuration(t.message_expiry)],
    ['Max size', (t) => (Number(t.max_topic_size) ? fmtBytes(t.max_topic_size) : 'server default')],
  ], rows, { class: 'topics-table' }));
  replace(ctx.main,
    h('p', { class: 'crumbs' }, h('a', { href: '#/streams' }, 'Streams'), ' / ', stream.name),
    h('h2', { id: 'stream-title', text: `Stream ${stream.name}` }),
    h('p', { class: 'meta', text: `id ${stream.id} · ${fmtNumber(stream.messages_count)} messages · ${fmtBytes(stream.size)} · created ${fmtTime(stream.created_at)}` }),
    message,
    h('div', { class: 'columns' },
      h('section', { class: 'card grow' }, h('h3', { text: 'Topics' }), list),
      h('section', { class: 'card side' }, h('h3', { text: 'New topic' }), create,
        h('h3', { text: 'Stream settings' }), rename, h('div', { class: 'actions' }, purge, remove))));
}
