// Rill console: connected clients, and the cluster (nodes with their roles, health and
// addresses, the metadata replica's view, primary and commit number).

import { api } from './api.js';
import { fmtNumber, h, notice, replace, table } from './dom.js';

export async function clientsPage(ctx) {
  const clients = await api('GET', '/clients');
  replace(ctx.main, h('h2', { text: `Connected clients (${clients.length})` }), h('section', { class: 'card' }, table([
    ['Client id', (c) => String(c.client_id)],
    ['User id', (c) => (c.user_id === null || c.user_id === undefined ? 'not logged in' : String(c.user_id))],
    ['Address', (c) => c.address],
    ['Transport', (c) => c.transport],
    ['Protocol', (c) => c.protocol],
    ['Consumer groups', (c) => fmtNumber(c.consumer_groups_count)],
  ], clients, { class: 'clients-table' })));
  ctx.every(5000, async () => {
    try {
      const now = await api('GET', '/clients');
      if (ctx.alive() && now.length !== clients.length) location.reload();
    } catch {
      // The banner or the log-in page says what happened.
    }
  });
}

export async function clusterPage(ctx) {
  const [cluster, stats] = await Promise.all([api('GET', '/cluster/metadata'), api('GET', '/stats')]);
  const nodes = cluster.nodes || [];
  const primary = nodes[stats.replica_primary];
  const health = (status) => h('span', { class: `badge health-${status}`, text: status });
  replace(ctx.main, h('h2', { text: `Cluster ${cluster.name}` }),
    h('div', { class: 'stats' },
      h('div', { class: 'stat' }, h('span', { class: 'stat-label', text: 'Nodes' }), h('strong', { class: 'stat-value', text: String(nodes.length) })),
      h('div', { class: 'stat' }, h('span', { class: 'stat-label', text: 'Primary' }), h('strong', { class: 'stat-value', id: 'cluster-primary', text: primary ? primary.name : '—' })),
      h('div', { class: 'stat' }, h('span', { class: 'stat-label', text: 'View' }), h('strong', { class: 'stat-value', id: 'cluster-view', text: String(stats.replica_view ?? '—') })),
      h('div', { class: 'stat' }, h('span', { class: 'stat-label', text: 'Metadata commit' }), h('strong', { class: 'stat-value', text: fmtNumber(stats.metadata_commit) })),
      h('div', { class: 'stat' }, h('span', { class: 'stat-label', text: 'This replica' }), h('strong', { class: 'stat-value', text: stats.replica_normal ? 'normal' : 'view change' }))),
    stats.replica_normal ? null : notice('info', 'This replica is in a view change: metadata writes wait for a new primary.'),
    h('section', { class: 'card' }, table([
      ['Node', (n) => n.name],
      ['Role', (n) => (n.role === 'leader' ? 'primary' : 'backup')],
      ['Health', (n) => health(n.status)],
      ['Address', (n) => n.ip],
      ['TCP', (n) => String(n.endpoints.tcp)], ['QUIC', (n) => String(n.endpoints.quic)],
      ['HTTP', (n) => String(n.endpoints.http)], ['WebSocket', (n) => String(n.endpoints.websocket)],
    ], nodes, { class: 'nodes-table' })));
}
