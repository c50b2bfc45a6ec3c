// History charts for a node or a GPU page, drawn with uPlot from the REST API's rollups.
const section = document.querySelector(".history");
const charts = section.querySelector(".charts");
const owners = section.querySelector(".owners");
const labels = JSON.parse(document.getElementById("labels").textContent).ui;

// Each chart: a title and the series to draw from the API's points.
const CHARTS = [
  // Utilization is a share: 0-100 % always, so a card at 70-90 % does not look like one
  // swinging from empty to full.
  { title: labels.utilization, range: [0, 100],
    series: [["util_avg", labels.average], ["util_max", labels.peak]] },
  { title: labels.memory, scale: 1 / 1024, series: [["memory_used_avg_mib", labels.average],
                                                    ["memory_used_max_mib", labels.peak]] },
  { title: labels.power, series: [["power_avg_w", labels.average], ["power_max_w", labels.peak]] },
  { title: labels.temperature, series: [["temperature_avg_c", labels.average],
                                        ["temperature_max_c", labels.peak]] },
];
const COLORS = ["#2563eb", "#b91c1c"];
// The time axis and the legend in the reader's time zone (the page's, base.html), not the
// browser's: a person who chose Asia/Shanghai reads the same hours as on the rest of the page.
const TIME_ZONE = document.querySelector('meta[name="time-zone"]')?.content || "UTC";
const inZone = (ts) => window.uPlot.tzDate(new Date(ts * 1000), TIME_ZONE);

// Seconds between refreshes of each range: a new minute lands once a minute, and one pixel of
// a 24 h or 7 d chart is a few minutes or a quarter hour, so those redraw less often.
const REFRESH_S = { "1h": 60, "24h": 120, "7d": 600 };

let shown = { range: null, start: 0, end: 0 };  // the range on screen and its window, in s
let generation = 0;  // bumped on each range change, so a late answer for the old one is dropped
let timer = null;
section.charts = [];  // the uPlot objects on screen (tests read their scales)

function clearCharts() {
  for (const plot of section.charts) plot.destroy();
  section.charts = [];
  charts.replaceChildren();
}

// The window's two ends go in as empty points, so the x axis spans exactly the chosen range
// (as scaled automatically, and after a double click undoes a zoom) whatever data there is.
function xValues(points) {
  const times = points.map((p) => Date.parse(p.t) / 1000);
  return [...(times[0] > shown.start ? [shown.start] : []), ...times, shown.end];
}

function chartData(chart, xs, points) {
  const lead = xs.length - points.length - 1;  // 1 when the window's start was added
  const column = ([key]) => [...Array(lead).fill(null),
    ...points.map((p) => (p[key] == null ? null : p[key] * (chart.scale ?? 1))), null];
  return [xs, ...chart.series.map(column)];
}

function drawCharts(points) {
  clearCharts();
  if (!points.length) {
    const empty = document.createElement("p");
    empty.className = "empty";
    empty.textContent = labels.no_data;
    charts.append(empty);
    return;
  }
  const xs = xValues(points);
  const width = Math.max(320, Math.min(charts.clientWidth / 2 - 16, 640));
  for (const chart of CHARTS) {
    const box = document.createElement("figure");
    box.className = "chart";
    box.dataset.chart = chart.series[0][0];
    charts.append(box);
    const data = chartData(chart, xs, points);
    if (!window.uPlot) {  // npm packages not installed: show the numbers instead
      box.textContent = `${chart.title}: ${data[1].filter((v) => v !== null).slice(-1)[0] ?? "–"}`;
      continue;
    }
    section.charts.push(new window.uPlot({
      title: chart.title, width, height: 200, tzDate: inZone,
      series: [{ label: labels.time },
        ...chart.series.map(([, label], i) => ({ label, stroke: COLORS[i], width: 1.5 }))],
      axes: [{}, { size: 50 }],
      ...(chart.range ? { scales: { y: { range: chart.range } } } : {}),
    }, data, box));
  }
}

// New points into the charts on screen (a full redraw only when charts come or go). A chart
// showing the whole previous window moves on to the new one; a zoomed one keeps its zoom.
function updateCharts(points, previous) {
  if (!points.length || section.charts.length !== CHARTS.length) {
    drawCharts(points);
    return;
  }
  const xs = xValues(points);
  CHARTS.forEach((chart, i) => {
    const plot = section.charts[i];
    const { min, max } = plot.scales.x;
    if (min === previous.start && max === previous.end) {
      plot.setData(chartData(chart, xs, points));
    } else {
      plot.setData(chartData(chart, xs, points), false);
      plot.setScale("x", { min, max });
    }
  });
}

function drawOwners(rows) {
  owners.replaceChildren();
  if (!rows.length) return;
  const table = document.getElementById("owners-template").content.firstElementChild.cloneNode(true);
  const body = table.querySelector("tbody");
  for (const row of rows) {
    const tr = body.insertRow();
    const owner = tr.insertCell();
    owner.dir = "auto";  // an owner name from the agent: its direction marks stay inside
    owner.textContent = row.owner;
    tr.insertCell().textContent = Math.round(row.memory_used_avg_mib ?? 0);
    tr.insertCell().textContent = Math.round(row.memory_used_max_mib ?? 0);
  }
  owners.append(table);
}

async function fetchRange(range) {
  const response = await fetch(`${section.dataset.historyUrl}?range=${range}`,
    { headers: { Accept: "application/json" }, credentials: "same-origin" });
  return response.ok ? response.json() : null;
}

function show(range, data) {
  const previous = shown;
  shown = { range, start: Date.parse(data.start) / 1000, end: Date.parse(data.end) / 1000 };
  section.dataset.loaded = range;
  if (previous.range !== range) drawCharts(data.points);
  else updateCharts(data.points, previous);
  drawOwners(data.owners);
}

// One timer for the page: a range change cancels the old range's before starting its own.
function schedule(range) {
  clearTimeout(timer);
  timer = setTimeout(() => refresh(range), (REFRESH_S[range] ?? 60) * 1000);
}

async function refresh(range) {
  const mine = generation;
  let data = null;
  if (!document.hidden) {  // a hidden tab catches up when it is shown again
    try {
      data = await fetchRange(range);
    } catch {
      data = null;  // offline for a moment: keep the charts and try again next time
    }
  }
  if (mine !== generation) return;
  schedule(range);  // first, so that a failure drawing this answer does not end the refreshes
  if (data) show(range, data);
}

function load(range) {
  for (const button of section.querySelectorAll("[data-range]")) {
    button.setAttribute("aria-pressed", String(button.dataset.range === range));
  }
  generation += 1;
  clearTimeout(timer);
  shown.range = null;
  refresh(range);
}

section.querySelector(".ranges").addEventListener("click", (event) => {
  const range = event.target.closest("[data-range]")?.dataset.range;
  if (range) load(range);
});
document.addEventListener("visibilitychange", () => {
  if (document.hidden || !shown.range) return;
  generation += 1;  // drops a refresh in flight, so one chain of timers goes on
  clearTimeout(timer);
  refresh(shown.range);
});
load(section.querySelector("[data-range]").dataset.range);
