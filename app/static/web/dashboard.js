// The dashboard's few behaviours beyond htmx (no inline scripts, nothing from outside).
(function () {
  "use strict";

  // A field the browser cannot read (a date and time typed in part) is sent as nothing, which the server
  // takes for "empty" (a key's expiry: never; a filter: none): such a form is not sent, and the field
  // says why (server-side messages sit in the same place). Runs before the confirmation and htmx.
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (!(form instanceof HTMLFormElement)) return;
    form.querySelectorAll("[data-client-check]").forEach(function (old) { old.remove(); });
    var bad = Array.prototype.filter.call(form.elements, function (field) {
      return field.validity && field.validity.badInput;
    });
    if (!bad.length) return;
    event.preventDefault();
    event.stopPropagation();
    bad.forEach(function (field) {
      var note = document.createElement("ul");
      note.className = "errorlist";
      note.setAttribute("role", "alert");
      note.setAttribute("data-client-check", "");
      note.setAttribute("data-field-errors", field.name);
      var item = document.createElement("li");
      item.textContent = /date|time/.test(field.type)
        ? "This date and time is incomplete: fill in every part, or clear it."
        : "This value cannot be read: correct it, or clear it.";
      note.appendChild(item);
      field.insertAdjacentElement("afterend", note);
    });
    bad[0].focus();
  }, true);

  // A plain form with data-confirm asks before it is sent (htmx forms use hx-confirm, with
  // hx-vals confirm=yes); a yes is sent as confirm=yes. Without JavaScript no confirm is sent and the
  // server answers with its own confirmation step (app/web/forms/confirm.py).
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (!(form instanceof HTMLFormElement)) return;
    var question = form.getAttribute("data-confirm");
    if (!question || form.hasAttribute("hx-post")) return;
    if (!window.confirm(question)) {
      event.preventDefault();
      return;
    }
    if (!form.querySelector("input[name=confirm]")) {
      var yes = document.createElement("input");
      yes.type = "hidden";
      yes.name = "confirm";
      yes.value = "yes";
      form.appendChild(yes);
    }
  }, true);

  // A live region swapped by its poll keeps the panels the user opened or closed: every <details>
  // with an id keeps its state across the swap (the Learning page's 2 s poll closed them).
  var kept = null;
  document.addEventListener("htmx:beforeSwap", function (event) {
    var target = event.detail.target;
    kept = {};
    if (!target) return;
    target.querySelectorAll("details[id]").forEach(function (panel) {
      kept[panel.id] = panel.open;
    });
  });
  document.addEventListener("htmx:afterSwap", function () {
    if (!kept) return;
    Object.keys(kept).forEach(function (id) {
      var panel = document.getElementById(id);
      if (panel && panel.tagName === "DETAILS") panel.open = kept[id];
    });
    kept = null;
  });

  // The navigation folds into a menu button on a narrow screen (CSS folds it only once this runs).
  function collapsible() {
    document.querySelectorAll("header.top").forEach(function (header) {
      if (header.querySelector("[data-nav-toggle]")) header.classList.add("nav-collapsible");
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", collapsible);
  else collapsible();
  document.addEventListener("click", function (event) {
    var button = event.target instanceof Element ? event.target.closest("[data-nav-toggle]") : null;
    if (!button) return;
    var header = button.closest("header");
    var open = header.classList.toggle("nav-open");
    button.setAttribute("aria-expanded", open ? "true" : "false");
  });
})();
