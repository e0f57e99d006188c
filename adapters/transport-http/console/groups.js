// Rill console: a consumer group's page. Members and the partitions each is assigned, the
// group's stored offset and lag per partition, and a live chart of the lag.

import { api, seg } from './api.js';
import { chartBlock } from './chart.js';
import { confirmDialog, fmtNumber, h, notice, replace, table } from './dom.js';

const TICK_MS = 1000;
const COLORS = ['#1f4fd1', '#e0742b', '#2a9d55', '#a23bc4', '#c43b3b', '#3bb2c4'];

/** Lag per partition of `groupId`: partitions it never stored an offset for lag by all. */
export function groupLag(stored, groupId) {
  return stored.partitions.map((partition) => {
    const offset = stored.offsets.find((o) => o.kind === 'consumer_group' && o.consumer_id === groupId && o.partition_id === partition.id);
    const messages = Number(partition.messages_count);
    const lag = offset ? Number(offset.lag) : messages;
    return { partition: partition.id, current: Number(partition.current_offset), stored: offset ? Number(offset.stored_offset) : null, lag, messages };
  });
}

export async function groupPage(ctx) {
  const [streamId, topicId, groupId] = ctx.params;
  const base = `/streams/${seg(streamId)}/topics/${seg(topicId)}`;
  const [topic, group] = await Promise.all([api('GET', base), api('GET', `${base}/consumer-groups/${seg(groupId)}`)]);
  const series = (topic.partitions || []).slice(0, COLORS.length).map((p, i) => ({ label: `partition ${p.id}`, color: COLORS[i] }));
  const lagChart = chartBlock(h, 'Lag (messages behind the end)', [{ label: 'total', color: '#222' }, ...series],
    { format: (v) => fmtNumber(Math.round(v)) });
  const members = h('div', { id: 'members' });
  const lagTable = h('div', { id: 'lag' });
  const total = h('strong', { id: 'total-lag', text: '…' });
  const message = h('div');
  const remove = h('button', { type: 'button', class: 'danger', id: 'delete-group', onclick: async () => {
    if (!(await confirmDialog(`Delete consumer group “${group.name}” and its stored offsets?`))) return;
    try {
      await api('DELETE', `${base}/consumer-groups/${group.id}`);
      location.hash = `#/streams/${streamId}/topics/${topicId}`;
    } catch (error) {
      replace(message, notice('error', error.message));
    }
  } }, 'Delete group');
  replace(ctx.main,
    h('p', { class: 'crumbs' }, h('a', { href: '#/streams' }, 'Streams'), ' / ',
      h('a', { href: `#/streams/${streamId}/topics/${topicId}` }, topic.name), ' / group'),
    h('h2', { id: 'group-title', text: `Consumer group ${group.name}` }),
    h('p', { class: 'meta' }, 'Total lag: ', total, ` · id ${group.id}`),
    message,
    h('div', { class: 'columns' },
      h('div', { class: 'grow' }, lagChart.node, h('section', { class: 'card' }, h('h3', { text: 'Lag per partition' }), lagTable)),
      h('div', { class: 'side' }, h('section', { class: 'card' }, h('h3', { text: 'Members' }), members), remove)));
  const tick = async () => {
    let now;
    let stored;
    try {
      [now, stored] = await Promise.all([api('GET', `${base}/consumer-groups/${group.id}`), api('GET', `${base}/stored-offsets`)]);
    } catch (error) {
      if (error.kind !== 'offline' && error.kind !== 'expired') replace(message, notice('error', error.message));
      return;
    }
    if (!ctx.alive()) return;
    const lag = groupLag(stored, group.id);
    const sum = lag.reduce((acc, row) => acc + row.lag, 0);
    total.textContent = fmtNumber(sum);
    total.dataset.lag = String(sum);
    lagChart.chart.push([sum, ...lag.slice(0, series.length).map((row) => row.lag)]);
    const owner = new Map();
    for (const member of now.members || []) for (const p of member.partitions || []) owner.set(p, member.id);
    replace(lagTable, table([
      ['Partition', (r) => String(r.partition)],
      ['Member', (r) => (owner.has(r.partition) ? `client ${owner.get(r.partition)}` : 'unassigned')],
      ['End offset', (r) => (r.messages ? fmtNumber(r.current) : '—')],
      ['Stored offset', (r) => (r.stored === null ? 'none' : fmtNumber(r.stored))],
      ['Lag', (r) => fmtNumber(r.lag)],
    ], lag, { class: 'lag-table' }));
    replace(members, (now.members || []).length ? table([
      ['Member (client id)', (m) => String(m.id)],
      ['Partitions', (m) => (m.partitions || []).join(', ') || 'none'],
    ], now.members, { class: 'members-table' }) : h('p', { class: 'empty', text: 'No members connected.' }));
  };
  await tick();
  ctx.every(TICK_MS, tick);
}
