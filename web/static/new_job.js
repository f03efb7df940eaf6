/* The new-job page, progressively enhanced. Without script every option group is shown, each labelled
   with the kinds it applies to, and the server ignores the groups the chosen kind does not take. With
   it: only the selected kind's groups are shown (the others are also disabled, so they are not sent),
   an error summary takes the focus when the form comes back with a problem and its links move the
   focus to the control they name, and the submit button is
   disabled once pressed so a double click does not submit the batch twice. A static file: the
   Content-Security-Policy allows no inline script. */
(function () {
  "use strict";

  var form = document.getElementById("new-job");
  if (!form) {
    return;
  }
  var kind = document.getElementById("kind");
  var groups = form.querySelectorAll("fieldset[data-kinds]");

  function showKind() {
    var chosen = kind.value;
    for (var i = 0; i < groups.length; i++) {
      var applies = groups[i].getAttribute("data-kinds").split(" ").indexOf(chosen) >= 0;
      groups[i].hidden = !applies;
      groups[i].disabled = !applies;
    }
  }

  if (kind) {
    kind.addEventListener("change", showKind);
    showKind();
  }

  var summary = document.getElementById("error-summary");
  if (summary) {
    summary.focus(); // it has autofocus too (for browsers without script); this covers older ones
    // Following a link of the summary puts the keyboard on the control it names (a fragment link
    // alone only scrolls there).
    summary.addEventListener("click", function (event) {
      var link = event.target.closest ? event.target.closest("a[href^='#']") : null;
      var target = link ? document.getElementById(link.getAttribute("href").slice(1)) : null;
      if (target) {
        event.preventDefault();
        target.focus();
        target.scrollIntoView({ block: "center" });
      }
    });
  }

  var button = document.getElementById("submit-job");
  form.addEventListener("submit", function () {
    if (button) {
      // After this turn of the event loop: disabling it now could drop it from the submission.
      window.setTimeout(function () {
        button.disabled = true;
        button.textContent = "Submitting…";
      }, 0);
    }
  });

  // Coming back through the browser's history: the button must work again.
  window.addEventListener("pageshow", function () {
    if (button) {
      button.disabled = false;
      button.textContent = "Submit job";
    }
  });
})();
