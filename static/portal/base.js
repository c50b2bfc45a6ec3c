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

// Every create form with a slug (pools, tenants): the slug follows the name as it is
// typed, until the person edits the slug (or it had a value already, as when editing).
// Only ASCII letters and digits make a slug: a name with no ASCII letter (all Chinese)
// leaves it empty for the person to type.
const slugOf = (name) => {
  if (!/[A-Za-z]/.test(name)) return "";
  return name
    .normalize("NFKD")
    .replace(/[\u0300-\u036f]/g, "")
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, "-")
    .replace(/^-+|-+$/g, "")
    .slice(0, 100);
};
for (const slug of document.querySelectorAll("input[data-slug-from]")) {
  const name = slug.form?.elements.namedItem(slug.dataset.slugFrom);
  if (!name) continue;
  let edited = slug.value !== "";
  slug.addEventListener("input", () => {
    edited = slug.value !== "";
  });
  name.addEventListener("input", () => {
    if (!edited) slug.value = slugOf(name.value);
  });
}

// Every memory field typed in GiB (portal.forms.GiBField): its hint says the MiB the
// value means as it is typed (the API and the agents count MiB).
for (const input of document.querySelectorAll("input[data-gib-input]")) {
  const hint = input.closest(".mb-3")?.querySelector(".form-hint");
  if (!hint) continue;
  const said = document.createElement("span");
  said.className = "gib-mib d-block fw-medium";
  hint.append(said);
  const update = () => {
    const mib = Number(input.value) * 1024;
    const whole = input.value !== "" && Number.isInteger(mib) && mib >= 0;
    said.textContent = whole ? `${input.value.trim()} GiB = ${mib} MiB` : "";
  };
  input.addEventListener("input", update);
  update();
}
