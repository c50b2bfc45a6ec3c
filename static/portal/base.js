// Every page: the language menu applies the choice at once (no inline handler, so the
// content security policy allows no inline script at all).
const select = document.getElementById("language-select");
if (select) select.addEventListener("change", () => select.form.submit());
