// Rill console: the message browser. One page of a partition at a time (by offset,
// timestamp, first or last), never the whole partition; payloads as text, pretty JSON or a
// hex dump; user headers decoded; paging by offset both ways. The browse state lives in the
// address, so a reload or a new log-in comes back to the same page.

import { api, fromBase64, seg } from './api.js';
import { fmtNumber, fmtTime, h, link, notice, replace } from './dom.js';

const KINDS = [['first', 'First'], ['last', 'Last'], ['offset', 'From offset'], ['timestamp', 'From time']];
const HEADER_KINDS = ['raw', 'string', 'bool', 'int8', 'int16', 'int32', 'int64', 'int128', 'uint8', 'uint16',
  'uint32', 'uint64', 'uint128', 'float32', 'float64'];

export function hexDump(bytes) {
  const lines = [];
  for (let at = 0; at < bytes.length; at += 16) {
    const row = bytes.slice(at, at + 16);
    const hex = Array.from(row, (b) => b.toString(16).padStart(2, '0')).join(' ');
    const text = Array.from(row, (b) => (b >= 32 && b < 127 ? String.fromCharCode(b) : '.')).join('');
    lines.push(`${at.toString(16).padStart(8, '0')}  ${hex.padEnd(47)}  ${text}`);
  }
  return lines.join('\n') || '(empty)';
}

function headerValue(kind, bytes) {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const name = HEADER_KINDS[kind - 1] || 'raw';
  const readers = {
    string: () => new TextDecoder().decode(bytes), bool: () => String(bytes[0] !== 0),
    int8: () => view.getInt8(0), int16: () => view.getInt16(0, true), int32: () => view.getInt32(0, true),
    int64: () => view.getBigInt64(0, true), uint8: () => view.getUint8(0), uint16: () => view.getUint16(0, true),
    uint32: () => view.getUint32(0, true), uint64: () => view.getBigUint64(0, true),
    float32: () => view.getFloat32(0, true), float64: () => view.getFloat64(0, true),
  };
  try {
    return String((readers[name] || (() => Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('')))());
  } catch {
    return `(${bytes.length} bytes of ${name})`;
  }
}

/** The raw user-header block: `[kind][len u32][key][kind][len u32][value]` per entry. */
export function decodeHeaders(base64) {
  const bytes = fromBase64(base64);
  const view = new DataView(bytes.buffer);
  const out = [];
  let at = 0;
  const field = () => {
    const kind = bytes[at];
    const length = view.getUint32(at + 1, true);
    const value = bytes.slice(at + 5, at + 5 + length);
    at += 5 + length;
    return [kind, value];
  };
  while (at + 5 <= bytes.length) {
    const [keyKind, key] = field();
    if (at + 5 > bytes.length) break;
    const [valueKind, value] = field();
    out.push([headerValue(keyKind, key), headerValue(valueKind, value), HEADER_KINDS[valueKind - 1] || '?']);
  }
  return out;
}

function payloadView(bytes, mode) {
  if (mode === 'hex') return h('pre', { class: 'payload hex', text: hexDump(bytes) });
  const text = new TextDecoder('utf-8', { fatal: false }).decode(bytes);
  if (mode === 'json') {
    try {
      return h('pre', { class: 'payload json', text: JSON.stringify(JSON.parse(text), null, 2) });
    } catch {
      return h('div', {}, h('span', { class: 'badge', text: 'not JSON' }), h('pre', { class: 'payload text', text }));
    }
  }
  return h('pre', { class: 'payload text', text });
}

function messageRow(message, mode) {
  const { header } = message;
  const headers = message.user_headers ? decodeHeaders(message.user_headers) : [];
  return h('article', { class: 'message', 'data-offset': String(header.offset) },
    h('div', { class: 'message-meta' },
      h('span', { class: 'offset', text: `offset ${fmtNumber(header.offset)}` }),
      h('span', { text: `id ${String(header.id)}` }),
      h('span', { text: fmtTime(header.timestamp) }),
      h('span', { text: `${fmtNumber(header.payload_length)} B` })),
    headers.length ? h('dl', { class: 'headers' }, headers.map(([key, value, kind]) =>
      [h('dt', { text: key }), h('dd', { text: value, title: kind })])) : null,
    payloadView(fromBase64(message.payload), mode));
}

function microsFromLocal(text) {
  const ms = new Date(text).getTime();
  return Number.isNaN(ms) ? null : ms * 1000;
}

export async function messagesPage(ctx) {
  const [streamId, topicId] = ctx.params;
  const q = ctx.query;
  const topicPath = `/streams/${seg(streamId)}/topics/${seg(topicId)}`;
  const [stream, topic] = await Promise.all([api('GET', `/streams/${seg(streamId)}`), api('GET', topicPath)]);
  const here = `/streams/${streamId}/topics/${topicId}/messages`;
  const state = {
    partition: q.get('partition') || '0', kind: q.get('kind') || 'first', value: q.get('value') || '',
    count: q.get('count') || '50', mode: q.get('mode') || 'text',
  };
  const go = (changes) => { location.hash = link(here, { ...state, ...changes }); };
  const partitionSelect = h('select', { name: 'partition' }, (topic.partitions || []).map((p) =>
    h('option', { value: p.id, selected: String(p.id) === state.partition }, `Partition ${p.id} (${fmtNumber(p.messages_count)})`)));
  const kindSelect = h('select', { name: 'kind' }, KINDS.map(([value, label]) => h('option', { value, selected: value === state.kind }, label)));
  const valueInput = h('input', { name: 'value', value: state.value, placeholder: 'offset, or 2026-12-01T10:00', size: 22 });
  const countSelect = h('select', { name: 'count' }, ['10', '50', '100', '500'].map((n) => h('option', { value: n, selected: n === state.count }, `${n} per page`)));
  const modes = h('div', { class: 'modes', role: 'group' }, [['text', 'Text'], ['json', 'JSON'], ['hex', 'Hex']].map(([mode, label]) =>
    h('button', { type: 'button', class: mode === state.mode ? 'active' : 'secondary', id: `mode-${mode}`,
      onclick: () => go({ mode }) }, label)));
  const problem = h('div', { class: 'field-error', 'data-for': 'value' });
  const controls = h('form', { class: 'browse-controls', id: 'browse', novalidate: true },
    partitionSelect, kindSelect, valueInput, countSelect, h('button', { type: 'submit' }, 'Show'), problem);
  controls.addEventListener('submit', (event) => {
    event.preventDefault();
    const kind = kindSelect.value;
    const value = valueInput.value.trim();
    if (kind === 'offset' && !/^\d+$/.test(value)) { problem.textContent = 'Offset must be a whole number'; return; }
    if (kind === 'timestamp' && microsFromLocal(value) === null) { problem.textContent = 'Time must be a date such as 2026-12-01T10:00'; return; }
    go({ partition: partitionSelect.value, kind, value, count: countSelect.value });
  });
  const list = h('div', { class: 'messages', id: 'message-list' }, h('p', { class: 'loading', text: 'Loading…' }));
  const pager = h('div', { class: 'pager' });
  replace(ctx.main,
    h('p', { class: 'crumbs' }, h('a', { href: '#/streams' }, 'Streams'), ' / ',
      h('a', { href: `#/streams/${streamId}` }, stream.name), ' / ',
      h('a', { href: `#/streams/${streamId}/topics/${topicId}` }, topic.name), ' / messages'),
    h('h2', { text: `Messages of ${topic.name}` }),
    h('section', { class: 'card' }, controls, modes, pager, list));
  const params = new URLSearchParams({ consumer_id: '0', partition_id: state.partition, count: state.count, auto_commit: 'false' });
  params.set('kind', state.kind);
  if (state.kind === 'offset') params.set('value', state.value || '0');
  if (state.kind === 'timestamp') params.set('value', String(microsFromLocal(state.value) || 0));
  let polled;
  try {
    polled = await api('GET', `${topicPath}/messages?${params}`);
  } catch (error) {
    replace(list, notice('error', error.message));
    return;
  }
  const messages = polled.messages || [];
  const count = Number(state.count);
  const first = messages.length ? Number(messages[0].header.offset) : 0;
  const last = messages.length ? Number(messages[messages.length - 1].header.offset) : -1;
  const end = Number(polled.current_offset);
  const older = h('button', { type: 'button', class: 'secondary', id: 'page-older', disabled: !messages.length || first === 0,
    onclick: () => go({ kind: 'offset', value: String(Math.max(0, first - count)) }) }, '‹ Older');
  const newer = h('button', { type: 'button', class: 'secondary', id: 'page-newer', disabled: !messages.length || last >= end,
    onclick: () => go({ kind: 'offset', value: String(last + 1) }) }, 'Newer ›');
  replace(pager, older, h('span', { class: 'pager-status', id: 'page-status', text: messages.length
    ? `Offsets ${fmtNumber(first)}–${fmtNumber(last)} of ${fmtNumber(end + 1)} in partition ${polled.partition_id}`
    : 'No messages here.' }), newer);
  replace(list, messages.length ? messages.map((m) => messageRow(m, state.mode)) : h('p', { class: 'empty', text: 'No messages at this position.' }));
}
