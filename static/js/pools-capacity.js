// The pool page: totals, fragmentation, the per-card map of slices and the risk list,
// first from the page's JSON, then from /ws/pools/<id>/ (pool.picture when slices or the
// pool change, pool.usage after each poll cycle). Nothing here asks the server again.
import { connect, fmt, GiB, initialData, labels } from "../telemetry/live.js";

const root = document.getElementById("pool");
const poolId = root.dataset.poolId;
const map = document.getElementById("card-map");
const riskList = document.getElementById("risk-list");
const riskNone = document.getElementById("risk-none");
let picture = initialData();
let usage = JSON.parse(document.getElementById("initial-usage").textContent);

// A pool's compute in whole-card percent, as cards (templatetags/pools_ui.py's ``cards``).
const cardsOf = (pct) => (pct === undefined || pct === null ? "–"
  : String(Number((pct / 100).toFixed(2))));
const gib = (mib) => fmt(mib === undefined || mib === null ? mib : mib / GiB, 1);
const pct = (part, whole) => (whole > 0 ? Math.max(0, Math.min(100, (100 * part) / whole)) : 0);

function setText(selector, values) {
  for (const el of root.querySelectorAll(selector)) {
    const key = el.dataset[Object.keys(el.dataset).find((k) => k !== "gib" && k !== "cards")];
    const value = values[key];
    const text = "gib" in el.dataset ? gib(value)
      : ("cards" in el.dataset ? cardsOf(value) : fmt(value, Number.isInteger(value) ? 0 : 1));
    if (el.textContent !== text) el.textContent = text;
  }
}

function cardTitle(card) {
  return `${card.node} #${card.index} · ${card.model}`;
}

function boxFor(card) {
  let box = map.querySelector(`[data-gpu-id="${card.id}"]`);
  if (!box) {
    box = document.getElementById("card-template").content.firstElementChild.cloneNode(true);
    box.dataset.gpuId = card.id;
  }
  return box;
}

// One bar: a segment per slice, as wide as its share of the card's capacity.
function drawBar(bar, slices, size, capacity, physical) {
  for (const el of bar.querySelectorAll(".slice, .physical-edge")) el.remove();
  const mark = bar.querySelector(".used-mark");
  for (const slice of slices) {
    const seg = document.createElement("span");
    seg.className = "slice";
    seg.dataset.owned = String(slice.owner !== null);
    seg.dataset.whole = String(slice.whole_card);
    seg.dataset.state = slice.state;
    seg.dataset.allocationId = slice.id;
    seg.style.width = `${pct(size(slice), capacity)}%`;
    seg.textContent = slice.owner ?? "";
    seg.title = slice.owner ?? labels.ui.hidden_owner;
    bar.insertBefore(seg, mark);
  }
  if (capacity > physical) {
    const edge = document.createElement("span");
    edge.className = "physical-edge";
    edge.style.left = `${pct(physical, capacity)}%`;
    bar.append(edge);
  }
}

function drawSlices(list, card) {
  list.replaceChildren();
  for (const slice of card.slices) {
    const li = document.createElement("li");
    li.dataset.allocationId = slice.id;
    const who = document.createElement(slice.url ? "a" : "span");
    if (slice.url) who.href = slice.url;
    else who.className = "text-secondary";
    who.textContent = slice.owner ?? labels.ui.hidden_owner;
    who.dir = "auto";
    const size = document.createElement("span");
    size.textContent = slice.whole_card
      ? labels.ui.whole_card
      : `${slice.compute_pct} % · ${gib(slice.memory_mib)} GiB`;
    li.append(who, size);
    list.append(li);
  }
}

function drawCard(card) {
  const box = boxFor(card);
  box.querySelector('[data-field="title"]').textContent = cardTitle(card);
  box.dataset.schedulable = String(card.schedulable);
  const flag = box.querySelector('[data-field="flag"]');
  flag.textContent = card.cordoned ? labels.ui.cordoned
    : (!card.schedulable ? labels.ui.unschedulable : (card.slice_count ? "" : labels.ui.free));
  flag.hidden = flag.textContent === "";
  box.querySelector('[data-field="compute"]').textContent =
    `${card.compute_allocated} / ${card.compute_capacity} %`;
  box.querySelector('[data-field="memory"]').textContent =
    `${gib(card.memory_allocated_mib)} / ${gib(card.memory_capacity_mib)} GiB`;
  drawBar(box.querySelector('[data-bar="compute"]'), card.slices, (s) => s.compute_pct,
    card.compute_capacity, 100);
  drawBar(box.querySelector('[data-bar="memory"]'), card.slices, (s) => s.memory_mib,
    card.memory_capacity_mib, card.memory_physical_mib);
  drawSlices(box.querySelector(".slice-list"), card);
  return box;
}

function drawPicture() {
  setText("[data-total]", picture.totals);
  setText("[data-frag]", picture.fragmentation);
  const boxes = picture.cards.map(drawCard);
  if (boxes.length) map.replaceChildren(...boxes);
  drawUsage();
}

function drawUsage() {
  setText("[data-usage]", usage);
  const byId = new Map(picture.cards.map((c) => [String(c.id), c]));
  for (const box of map.querySelectorAll(".pool-card")) {
    const card = byId.get(box.dataset.gpuId);
    const reading = usage.cards[box.dataset.gpuId] ?? {};
    box.dataset.risk = String(Boolean(reading.at_risk));
    const compute = box.querySelector('[data-mark="compute"]');
    const memory = box.querySelector('[data-mark="memory"]');
    compute.hidden = reading.utilization_gpu_pct === undefined || reading.utilization_gpu_pct === null;
    memory.hidden = reading.memory_used_mib === undefined || reading.memory_used_mib === null;
    if (card) {
      compute.style.left = `${pct(reading.utilization_gpu_pct ?? 0, card.compute_capacity)}%`;
      memory.style.left = `${pct(reading.memory_used_mib ?? 0, card.memory_capacity_mib)}%`;
    }
  }
  riskList.replaceChildren();
  for (const id of usage.at_risk) {
    const card = byId.get(String(id));
    const reading = usage.cards[String(id)];
    if (!card || !reading) continue;
    const li = document.createElement("li");
    li.className = "text-danger";
    li.dataset.gpuId = id;
    li.textContent = `${cardTitle(card)}: ${gib(reading.memory_used_mib)} / ` +
      `${gib(card.memory_physical_mib)} GiB · ${labels.ui.at_risk}`;
    riskList.append(li);
  }
  riskNone.hidden = riskList.children.length > 0;
}

drawPicture();
connect(`/ws/pools/${poolId}/`, (message) => {
  if (message.type === "pool.picture") {
    picture = message.picture;
    drawPicture();
  } else if (message.type === "pool.usage") {
    usage = message.usage;
    drawUsage();
  }
});

