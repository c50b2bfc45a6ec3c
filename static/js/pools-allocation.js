// Launch settings (a vGPU's page, a request's page): copy a block to the clipboard.
// Listening on the document covers panels that live updates draw later.
document.addEventListener("click", async (event) => {
  const button = event.target.closest("[data-copy]");
  if (!button) return;
  const block = document.getElementById(button.dataset.copy);
  if (!block) return;
  const status = button.closest(".how-to-use")?.querySelector(".copy-status");
  try {
    await navigator.clipboard.writeText(block.textContent);
    if (status) status.textContent = status.dataset.copied ?? "";
  } catch {
    // No clipboard (plain HTTP): select the block so Ctrl+C copies it.
    const range = document.createRange();
    range.selectNodeContents(block);
    getSelection().removeAllRanges();
    getSelection().addRange(range);
  }
});
