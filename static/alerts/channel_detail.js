// The channel page: ask before a button marked data-confirm submits its form.
for (const button of document.querySelectorAll("button[data-confirm]")) {
  button.form?.addEventListener("submit", (event) => {
    if (!window.confirm(button.dataset.confirm)) event.preventDefault();
  });
}
