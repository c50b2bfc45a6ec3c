// Usage bars on the tenant pages: each part's width comes from its data-width (a percent
// of the quota's limit), set here because the page's policy allows no inline styles.
for (const part of document.querySelectorAll(".quota-bars [data-width]")) {
  const pct = Math.max(0, Math.min(100, Number.parseFloat(part.dataset.width) || 0));
  part.style.width = `${pct}%`;
}
