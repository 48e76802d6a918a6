// kubectl dlq ui: follows running actions. The pages work without it (reload to see progress);
// with it, progress bars move on their own. No framework, no build step.
(function () {
  "use strict";
  var pollMs = parseInt(document.body.getAttribute("data-poll-ms"), 10) || 1000;
  var base = document.body.getAttribute("data-base") || "/";

  function text(id, value) {
    var el = document.getElementById(id);
    if (el) { el.textContent = String(value); }
  }

  function show(view) {
    var bar = document.getElementById("progress");
    if (bar) {
      bar.value = view.percent;
      bar.setAttribute("aria-valuenow", String(view.percent));
      bar.textContent = view.percent + "%";
    }
    text("percent", view.percent);
    text("phase", view.phase);
    text("done", view.done);
    text("skipped", view.skipped);
    text("skipped-why", view.skippedWhy ? " (" + view.skippedWhy + ")" : "");
    text("failed", view.failed);
    text("matched-n", view.matched);
    var msg = document.getElementById("message");
    if (msg) {
      msg.textContent = view.message || "";
      msg.hidden = !view.message;
    }
    if (view.finished) {
      var fin = document.getElementById("finished");
      if (fin) { fin.hidden = false; }
      text("completed", view.completed);
    }
  }

  function follow(box) {
    var name = box.getAttribute("data-action");
    var dry = box.getAttribute("data-dry-run") === "true";
    function tick() {
      fetch(base + "api/actions/" + encodeURIComponent(name), { credentials: "same-origin", headers: { "Accept": "application/json" } })
        .then(function (r) { return r.json(); })
        .then(function (view) {
          if (view.error) {
            var msg = document.getElementById("message");
            if (msg) { msg.textContent = view.error; msg.hidden = false; }
            window.setTimeout(tick, pollMs * 2);
            return;
          }
          if (dry) {
            if (view.finished) { window.location.reload(); return; }
            text("dry-status", "Counting what the action would match (dry run " + view.name + ": " + view.phase + ")…");
          } else {
            show(view);
            if (view.finished) { return; }
          }
          window.setTimeout(tick, pollMs);
        })
        .catch(function () { window.setTimeout(tick, pollMs * 2); });
    }
    tick();
  }

  document.addEventListener("DOMContentLoaded", function () {
    var box = document.getElementById("action");
    if (box && box.getAttribute("data-finished") === "false") { follow(box); }
    if (document.querySelector("[data-reload=true]")) {
      window.setTimeout(function () { window.location.reload(); }, pollMs * 2);
    }
  });
})();
