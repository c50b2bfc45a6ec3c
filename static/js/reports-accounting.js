// The accounting page's chart: GPU-hours held, used and idle per day, drawn with uPlot
// from the JSON the page carries (no request of its own).
const box = document.getElementById("accounting-chart");
const days = JSON.parse(document.getElementById("accounting-days").textContent);
const labels = JSON.parse(document.getElementById("accounting-labels").textContent);

if (box && days.length) {
  // Calendar days, not moments: midnight UTC, drawn in UTC, so no time zone moves a day.
  const xs = days.map((d) => Date.parse(d.day + "T00:00:00Z") / 1000);
  const data = [xs, days.map((d) => d.gpu_hours), days.map((d) => d.used_gpu_hours),
                days.map((d) => d.idle_gpu_hours)];
  const opts = {
    width: Math.max(320, box.clientWidth || 640), height: 240,
    tzDate: (ts) => uPlot.tzDate(new Date(ts * 1000), "UTC"),
    // The x series' label is uPlot's English "Time" unless named.
    series: [{ label: labels.day }, { label: labels.held, stroke: "#2563eb" }, { label: labels.used, stroke: "#16a34a" },
             { label: labels.idle, stroke: "#b45309" }],
    axes: [{}, { label: labels.unit }],
  };
  box.plot = new uPlot(opts, data, box);
}
