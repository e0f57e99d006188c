// Rill console: the overview. Live throughput in and out (messages/s and bytes/s, from the
// difference of the server's counters every second) and the server's figures.

import { api } from './api.js';
import { chartBlock } from './chart.js';
import { fmtBytes, fmtDuration, fmtNumber, h, notice, replace } from './dom.js';

const TICK_MS = 1000;

function card(label, value, id) {
  return h('div', { class: 'stat' }, h('span', { class: 'stat-label', text: label }),
    h('strong', { class: 'stat-value', id, text: value }));
}

function statCards(stats) {
  const uptime = fmtDuration(Number(stats.run_time || 0), '0 s');
  return [
    card('Version', stats.iggy_server_version || '—'),
    card('Uptime', uptime, 'stat-uptime'),
    card('Streams', fmtNumber(stats.streams_count), 'stat-streams'),
    card('Topics', fmtNumber(stats.topics_count)),
    card('Partitions', fmtNumber(stats.partitions_count)),
    card('Segments', fmtNumber(stats.segments_count)),
    card('Messages', fmtNumber(stats.messages_count), 'stat-messages'),
    card('Stored', fmtBytes(stats.messages_size_bytes)),
    card('Clients', fmtNumber(stats.clients_count), 'stat-clients'),
    card('Consumer groups', fmtNumber(stats.consumer_groups_count)),
    card('Server CPU', `${Number(stats.cpu_usage || 0).toFixed(1)} %`),
    card('Memory', fmtBytes(stats.memory_usage)),
    card('Disk free', `${fmtBytes(stats.disk_available_bytes ?? stats.free_disk_space)} of ${fmtBytes(stats.disk_total_bytes ?? stats.total_disk_space)}`),
    card('Shards', fmtNumber(stats.shards_count)),
    card('Pool buffers in use', fmtNumber(stats.memory_pool_in_use_buffers)),
    card('Damaged batches', fmtNumber(stats.damaged_batches)),
  ];
}

export async function overviewPage(ctx) {
  const stats = await api('GET', '/stats');
  const rate = (value) => `${fmtNumber(value)}/s`;
  const byteRate = (value) => `${fmtBytes(value)}/s`;
  const messages = chartBlock(h, 'Messages per second', [
    { label: 'in (sent)', color: '#1f4fd1' }, { label: 'out (polled)', color: '#e0742b' }], { format: rate });
  const bytes = chartBlock(h, 'Bytes per second', [
    { label: 'in (sent)', color: '#1f4fd1' }, { label: 'out (polled)', color: '#e0742b' }], { format: byteRate });
  const live = h('p', { class: 'live', id: 'throughput-now' });
  const cards = h('div', { class: 'stats', id: 'server-stats' }, statCards(stats));
  const warnings = h('div');
  replace(ctx.main, h('h2', { text: `Overview · ${stats.hostname || 'server'}` }), live,
    h('div', { class: 'charts' }, messages.node, bytes.node), warnings, cards);
  let last = { stats, at: performance.now() };
  const tick = async () => {
    let now;
    try {
      now = await api('GET', '/stats');
    } catch (error) {
      if (error.kind === 'forbidden') replace(warnings, notice('error', error.message));
      return;
    }
    if (!ctx.alive()) return;
    const at = performance.now();
    const seconds = Math.max(0.001, (at - last.at) / 1000);
    const per = (key) => Math.max(0, Number(now[key] || 0) - Number(last.stats[key] || 0)) / seconds;
    const inMessages = per('messages_in_total');
    const outMessages = per('messages_out_total');
    messages.chart.push([inMessages, outMessages]);
    bytes.chart.push([per('bytes_in_total'), per('bytes_out_total')]);
    live.textContent = `Now: ${rate(inMessages)} in, ${rate(outMessages)} out · ` +
      `${byteRate(per('bytes_in_total'))} in, ${byteRate(per('bytes_out_total'))} out`;
    live.dataset.messagesIn = String(Math.round(inMessages));
    replace(cards, statCards(now));
    replace(warnings, now.disk_below_floor
      ? notice('error', 'The data volume is below its free-space floor: sends are refused.') : null);
    last = { stats: now, at };
  };
  messages.chart.push([0, 0]);
  bytes.chart.push([0, 0]);
  ctx.every(TICK_MS, tick);
}
