/* Live progress of the job page: poll the small JSON endpoint and move the bar and the counters.
   Loaded as a static file (the Content-Security-Policy allows no inline script). Only textContent
   and element properties are set, never HTML. When the job ends the page reloads once to show the
   report (the reloaded page is no longer live, so it does not poll). */
(function () {
  "use strict";

  var root = document.querySelector("[data-progress-url]");
  if (!root || root.getAttribute("data-live") !== "true") {
    return;
  }
  var url = root.getAttribute("data-progress-url");
  var bar = root.querySelector("progress");
  var fast = 1500;
  var slow = 6000;

  function setText(name, value) {
    var nodes = document.querySelectorAll('[data-field="' + name + '"]');
    for (var i = 0; i < nodes.length; i++) {
      nodes[i].textContent = value;
    }
  }

  function update(data) {
    if (bar && typeof data.percent === "number") {
      bar.value = data.percent;
      bar.textContent = data.text.percent;
    }
    setText("percent", data.text.percent);
    setText("status", data.text.status);
    setText("cost", data.text.cost);
    setText("elapsed", data.text.elapsed);
    setText("schedule", data.text.schedule || "");
    setText("counts-as-of", data.text.counts_as_of || "");
    var counts = data.counts || {};
    Object.keys(counts).forEach(function (key) {
      setText("count-" + key, String(counts[key]));
    });
  }

  function schedule(ms) {
    window.setTimeout(poll, ms);
  }

  function poll() {
    fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" }, cache: "no-store" })
      .then(function (resp) {
        if (resp.status === 401) {
          window.location.reload();
          return null;
        }
        return resp.ok ? resp.json() : null;
      })
      .then(function (data) {
        if (!data) {
          schedule(slow);
          return;
        }
        update(data);
        if (data.ended) {
          window.location.reload();
        } else {
          schedule(fast);
        }
      })
      .catch(function () {
        schedule(slow);
      });
  }

  schedule(fast);
})();
