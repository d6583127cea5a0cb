// A sparkline: the last values of one figure as a small SVG line with its latest value,
// drawn by hand (no charting library): the operator page's charts.

const SVG = "http://www.w3.org/2000/svg";
const WIDTH = 240;
const HEIGHT = 48;

function svg(tag, attrs) {
  const element = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) element.setAttribute(name, String(value));
  return element;
}

// `sparkline("Requests/s", (v) => v.toFixed(1))`: `.element` to place, `.push(value)` per
// sample (null: unknown, drawn as a gap), at most `keep` samples shown.
export function sparkline(title, format = String, keep = 150) {
  const values = [];
  const line = svg("polyline", {fill: "none", stroke: "currentColor", "stroke-width": 1.5, "vector-effect": "non-scaling-stroke"});
  const chart = svg("svg", {viewBox: `0 0 ${WIDTH} ${HEIGHT}`, width: WIDTH, height: HEIGHT, preserveAspectRatio: "none", role: "img"});
  chart.append(line);
  const latest = document.createElement("strong");
  const peak = document.createElement("span");
  peak.className = "muted";
  const head = document.createElement("div");
  head.className = "spark-head";
  head.append(document.createTextNode(`${title} `), latest, document.createTextNode(" "), peak);
  const element = document.createElement("figure");
  element.className = "spark";
  element.append(head, chart);

  function draw() {
    const known = values.filter((v) => v !== null);
    const top = Math.max(1e-9, ...known);
    const step = WIDTH / Math.max(1, keep - 1);
    const offset = keep - values.length;
    line.setAttribute("points", values.map((v, i) => v === null ? null
      : `${((offset + i) * step).toFixed(1)},${(HEIGHT - 2 - (v / top) * (HEIGHT - 4)).toFixed(1)}`).filter(Boolean).join(" "));
    const last = values[values.length - 1];
    latest.textContent = last === null || last === undefined ? "–" : format(last);
    peak.textContent = known.length ? `(max ${format(Math.max(...known))})` : "";
    element.dataset.samples = String(values.length);
    element.dataset.latest = last === null || last === undefined ? "" : String(last);
  }

  draw();
  return {
    element,
    push(value) {
      values.push(value === undefined || Number.isNaN(value) ? null : value);
      while (values.length > keep) values.shift();
      draw();
    },
  };
}
