// The dashboard's own script, loaded from a file: the Content-Security-Policy allows no
// inline script (and no eval, so htmx's trigger filters are replaced by `data-poll` below).
(function () {
  "use strict";

  // A polling element (`data-poll`) asks nothing while its tab is hidden, nor while the
  // selector in its `data-poll` value matches something (an open <details> it would wipe).
  document.addEventListener("htmx:confirm", function (event) {
    var elt = event.detail.elt;
    if (!elt || !elt.hasAttribute || !elt.hasAttribute("data-poll")) { return; }
    var unless = elt.getAttribute("data-poll");
    if (document.visibilityState !== "visible" || (unless && document.querySelector(unless))) {
      event.preventDefault();
    }
  });

  // "/" focuses the search box, unless one is typing somewhere already.
  document.addEventListener("keydown", function (event) {
    var field = document.getElementById("q");
    var tag = (event.target.tagName || "").toLowerCase();
    if (event.key === "/" && field && tag !== "input" && tag !== "textarea" && tag !== "select") {
      event.preventDefault();
      field.focus();
    }
  });

  // A message's page: one click copies the ticket summary (selected for Ctrl-C where the
  // clipboard is refused).
  document.addEventListener("click", function (event) {
    if (!event.target.closest || !event.target.closest("#copy-ticket")) { return; }
    var text = document.getElementById("ticket-summary");
    var said = document.getElementById("copy-ticket-said");
    var copied = "Copied: recipient masked, no body.";
    var manual = function () {
      text.closest("details").open = true;
      text.select();
    };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text.value).then(function () {
        said.textContent = copied;
      }, function () {
        manual();
        said.textContent = "Press Ctrl-C to copy.";
      });
    } else {
      manual();
      said.textContent = document.execCommand("copy") ? copied : "Press Ctrl-C to copy.";
    }
  });

  // A bulk plan: the confirm button states the exact count the ticks add up to.
  document.addEventListener("change", function (event) {
    var form = event.target.closest && event.target.closest("#confirm-form");
    var count = document.getElementById("confirm-count");
    if (!form || !count) { return; }
    var total = 0;
    form.querySelectorAll("input[name=group]:checked").forEach(function (box) {
      total += parseInt(box.getAttribute("data-count"), 10);
    });
    count.textContent = total.toLocaleString("en-US");
    document.getElementById("confirm-button").disabled = total === 0;
  });
})();
