// The channel form: show only the settings the chosen kind uses (each input names its
// kinds in data-kinds); hidden ones are not sent, and the server ignores them anyway.
const form = document.getElementById("channel-form");
const kind = form?.querySelector("select[name=kind]");

function update() {
  for (const input of form.querySelectorAll("[data-kinds]")) {
    const used = input.dataset.kinds.split(" ").includes(kind.value);
    const row = input.closest(".mb-3");
    if (row) row.hidden = !used;
    input.disabled = !used;
  }
}

if (form && kind) {
  kind.addEventListener("change", update);
  update();
}
