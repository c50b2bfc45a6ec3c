// Node form: "Test connection" posts the form to the test endpoint and shows the answer
// in place, so the token typed into the form is neither saved nor lost. Without
// JavaScript the button still works: it opens the answer as a page.
const form = document.getElementById("node-form");
const button = document.getElementById("test-connection");
const output = document.getElementById("connection-result");

button.addEventListener("click", async (event) => {
  event.preventDefault();
  button.disabled = true;
  output.textContent = "…";
  try {
    const response = await fetch(button.formAction, {
      method: "POST",
      body: new FormData(form),
      credentials: "same-origin",
    });
    output.innerHTML = await response.text();
  } catch (error) {
    output.textContent = String(error);
  } finally {
    button.disabled = false;
  }
});
