// Rill console: a small line chart on a canvas, for live series (throughput, lag). It keeps a
// fixed window of points and redraws on every push; no library, nothing fetched.

const PADDING = { left: 64, right: 12, top: 12, bottom: 22 };

export class LineChart {
  /** `series`: `[{label, color}]`; `format(value)` labels the y axis. */
  constructor(canvas, series, { points = 60, format = String } = {}) {
    this.canvas = canvas;
    this.series = series;
    this.points = points;
    this.format = format;
    this.values = series.map(() => []);
  }

  /** Appends one value per series and redraws. */
  push(values) {
    values.forEach((value, index) => {
      const list = this.values[index];
      list.push(Math.max(0, Number(value) || 0));
      if (list.length > this.points) list.shift();
    });
    this.draw();
  }

  latest(index) {
    const list = this.values[index];
    return list.length ? list[list.length - 1] : 0;
  }

  draw() {
    const { canvas } = this;
    const ratio = window.devicePixelRatio || 1;
    const width = canvas.clientWidth || 600;
    const height = canvas.clientHeight || 180;
    if (canvas.width !== width * ratio) canvas.width = width * ratio;
    if (canvas.height !== height * ratio) canvas.height = height * ratio;
    const ctx = canvas.getContext('2d');
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, width, height);
    const max = Math.max(1, ...this.values.flat()) * 1.1;
    const plotW = width - PADDING.left - PADDING.right;
    const plotH = height - PADDING.top - PADDING.bottom;
    const x = (i) => PADDING.left + (plotW * i) / Math.max(1, this.points - 1);
    const y = (v) => PADDING.top + plotH - (plotH * v) / max;
    ctx.font = '11px system-ui, sans-serif';
    ctx.fillStyle = '#667';
    ctx.strokeStyle = '#e3e6ee';
    ctx.lineWidth = 1;
    for (let step = 0; step <= 4; step += 1) {
      const value = (max * step) / 4;
      ctx.beginPath();
      ctx.moveTo(PADDING.left, y(value));
      ctx.lineTo(width - PADDING.right, y(value));
      ctx.stroke();
      ctx.fillText(this.format(value), 4, y(value) + 4);
    }
    ctx.fillText(`last ${this.points} samples`, PADDING.left, height - 6);
    this.series.forEach((series, index) => {
      const list = this.values[index];
      const offset = this.points - list.length;
      ctx.strokeStyle = series.color;
      ctx.lineWidth = 2;
      ctx.beginPath();
      list.forEach((value, i) => (i ? ctx.lineTo(x(offset + i), y(value)) : ctx.moveTo(x(offset + i), y(value))));
      ctx.stroke();
    });
  }
}

/** A chart with its legend, as one block: returns `{node, chart}`. */
export function chartBlock(h, title, series, options) {
  const canvas = h('canvas', { class: 'chart', width: 600, height: 180 });
  const chart = new LineChart(canvas, series, options);
  // Colours through the CSSOM: the console's policy refuses inline style attributes.
  const swatch = (color) => {
    const node = h('i');
    node.style.background = color;
    return node;
  };
  const legend = h('div', { class: 'legend' }, series.map((s) => h('span', {}, swatch(s.color), s.label)));
  return { node: h('section', { class: 'card chart-card' }, h('h3', { text: title }), legend, canvas), chart };
}
