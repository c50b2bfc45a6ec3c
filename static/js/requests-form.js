// The request form: a whole card has no slice size to give, so its fields step aside.
const form = document.getElementById("request-form");
if (form) {
  const sizeFields = ["id_compute_pct", "id_memory_mib"].map((id) => document.getElementById(id));
  const update = () => {
    const whole = form.querySelector("input[name=size][value=whole]")?.checked;
    for (const field of sizeFields) {
      if (!field) continue;
      field.disabled = Boolean(whole);
      field.closest(".mb-3")?.classList.toggle("d-none", Boolean(whole));
    }
  };
  form.addEventListener("change", update);
  update();
}
