// Every page: the language menu applies the choice at once (no inline handler, so the
// content security policy allows no inline script at all).
const select = document.getElementById("language-select");
if (select) select.addEventListener("change", () => select.form.submit());

// Every page: a button marked data-confirm (Release, Drain, Delete...) asks before its form
// is sent. Listening on the document covers forms that live updates draw later too.
document.addEventListener("submit", (event) => {
  const message = event.submitter?.dataset.confirm;
  if (message && !window.confirm(message)) event.preventDefault();
});
