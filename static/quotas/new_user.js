// The new user's details show only while the form's "Make a new user" box is ticked.
// Without JavaScript they stay shown; the server reads them only when it is ticked.
for (const fieldset of document.querySelectorAll("fieldset[data-shown-by]")) {
  const box = document.getElementById(fieldset.dataset.shownBy);
  if (!box) continue;
  const update = () => {
    fieldset.hidden = !box.checked;
  };
  box.addEventListener("change", update);
  update();
}
