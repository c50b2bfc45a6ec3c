// The allocation page: copy the launch settings to the clipboard.
const status = document.getElementById("copy-status");
const copied = document.getElementById("copied-label")?.textContent ?? "";

for (const button of document.querySelectorAll("[data-copy]")) {
  button.addEventListener("click", async () => {
    const text = document.getElementById(button.dataset.copy).textContent;
    try {
      await navigator.clipboard.writeText(text);
      if (status) status.textContent = copied;
    } catch {
      // No clipboard (plain HTTP): select the block so Ctrl+C copies it.
      const range = document.createRange();
      range.selectNodeContents(document.getElementById(button.dataset.copy));
      getSelection().removeAllRanges();
      getSelection().addRange(range);
    }
  });
}
