// History charts for a node or a GPU page, drawn with uPlot from the REST API's rollups.
const section = document.querySelector(".history");
const charts = section.querySelector(".charts");
const owners = section.querySelector(".owners");
const labels = JSON.parse(document.getElementById("labels").textContent).ui;

// Each chart: a title and the series to draw from the API's points.
const CHARTS = [
  { title: labels.utilization, series: [["util_avg", labels.average], ["util_max", labels.peak]] },
  { title: labels.memory, scale: 1 / 1024, series: [["memory_used_avg_mib", labels.average],
                                                    ["memory_used_max_mib", labels.peak]] },
  { title: labels.power, series: [["power_avg_w", labels.average], ["power_max_w", labels.peak]] },
  { title: labels.temperature, series: [["temperature_avg_c", labels.average],
                                        ["temperature_max_c", labels.peak]] },
];
const COLORS = ["#2563eb", "#b91c1c"];

function drawCharts(points) {
  charts.replaceChildren();
  if (!points.length) {
    const empty = document.createElement("p");
    empty.className = "empty";
    empty.textContent = labels.no_data;
    charts.append(empty);
    return;
  }
  const times = points.map((p) => Date.parse(p.t) / 1000);
  const width = Math.max(320, Math.min(charts.clientWidth / 2 - 16, 640));
  for (const chart of CHARTS) {
    const box = document.createElement("figure");
    box.className = "chart";
    box.dataset.chart = chart.series[0][0];
    charts.append(box);
    const data = [times, ...chart.series.map(([key]) =>
      points.map((p) => (p[key] === null || p[key] === undefined ? null : p[key] * (chart.scale ?? 1))))];
    if (!window.uPlot) {  // npm packages not installed: show the numbers instead
      box.textContent = `${chart.title}: ${data[1].filter((v) => v !== null).slice(-1)[0] ?? "–"}`;
      continue;
    }
    new window.uPlot({
      title: chart.title, width, height: 200,
      series: [{ label: labels.time },
        ...chart.series.map(([, label], i) => ({ label, stroke: COLORS[i], width: 1.5 }))],
      axes: [{}, { size: 50 }],
    }, data, box);
  }
}

function drawOwners(rows) {
  owners.replaceChildren();
  if (!rows.length) return;
  const table = document.getElementById("owners-template").content.firstElementChild.cloneNode(true);
  const body = table.querySelector("tbody");
  for (const row of rows) {
    const tr = body.insertRow();
    tr.insertCell().textContent = row.owner;
    tr.insertCell().textContent = Math.round(row.memory_used_avg_mib ?? 0);
    tr.insertCell().textContent = Math.round(row.memory_used_max_mib ?? 0);
  }
  owners.append(table);
}

async function load(range) {
  for (const button of section.querySelectorAll("[data-range]")) {
    button.setAttribute("aria-pressed", String(button.dataset.range === range));
  }
  const response = await fetch(`${section.dataset.historyUrl}?range=${range}`,
    { headers: { Accept: "application/json" }, credentials: "same-origin" });
  if (!response.ok) return;
  const data = await response.json();
  section.dataset.loaded = range;
  drawCharts(data.points);
  drawOwners(data.owners);
}

section.querySelector(".ranges").addEventListener("click", (event) => {
  const range = event.target.closest("[data-range]")?.dataset.range;
  if (range) load(range);
});
load(section.querySelector("[data-range]").dataset.range);
