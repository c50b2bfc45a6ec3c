// The Copy button beside a new API token: copies the key shown once, and says so.
for (const button of document.querySelectorAll("button[data-copy]")) {
  button.addEventListener("click", async () => {
    const source = document.getElementById(button.dataset.copy);
    if (!source) return;
    try {
      await navigator.clipboard.writeText(source.textContent.trim());
      button.textContent = button.dataset.copied;
    } catch {
      // No clipboard (plain HTTP, or refused): select the key for Ctrl+C instead, and say so.
      window.getSelection().selectAllChildren(source);
      button.textContent = button.dataset.selected;
    }
  });
}
