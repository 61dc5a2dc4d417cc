/* lockdown report (lockdown/reports/html_report.py): copy buttons for patches, opening the
   <details> a link points to, expand/collapse all requests. No network, no globals; nothing
   here may throw on a file:// page (clipboard refused, no secure context, old browser). */
(function () {
  "use strict";
  function closest(el, selector) {
    while (el && el.nodeType === 1) {
      if (el.matches && el.matches(selector)) return el;
      el = el.parentNode;
    }
    return null;
  }
  function flash(btn, text) {
    var label = btn.getAttribute("data-label");
    if (!label) { label = btn.textContent; btn.setAttribute("data-label", label); }
    btn.textContent = text;
    window.setTimeout(function () { btn.textContent = label; }, 2500);
  }
  function selectText(el) {
    try {
      var range = document.createRange();
      range.selectNodeContents(el);
      var sel = window.getSelection();
      sel.removeAllRanges();
      sel.addRange(range);
      return true;
    } catch (e) { return false; }
  }
  function fallback(btn, pre) {
    var ok = false;
    if (selectText(pre)) {
      try { ok = document.execCommand("copy"); } catch (e) { ok = false; }
    }
    flash(btn, ok ? "Copied" : "Selected: press Ctrl-C");
  }
  function copy(btn) {
    var pre = document.getElementById(btn.getAttribute("data-copy"));
    if (!pre) return;
    var text = pre.textContent;
    try {
      if (navigator.clipboard && navigator.clipboard.writeText && window.isSecureContext) {
        navigator.clipboard.writeText(text).then(
          function () { flash(btn, "Copied"); },
          function () { fallback(btn, pre); });
        return;
      }
    } catch (e) { /* clipboard API missing or refused synchronously */ }
    fallback(btn, pre);
  }
  function openTo(id) {
    var el = id && document.getElementById(id);
    if (!el) return;
    for (var d = el; d; d = d.parentNode) {
      if (d.nodeName === "DETAILS") d.open = true;
    }
    if (el.scrollIntoView) el.scrollIntoView();
  }
  function fromHash() {
    var id = window.location.hash.slice(1);
    try { id = decodeURIComponent(id); } catch (e) { return; }
    openTo(id);
  }
  document.addEventListener("click", function (e) {
    var btn = closest(e.target, "button.copy");
    if (btn) { e.preventDefault(); copy(btn); return; }
    var all = closest(e.target, "button[data-details]");
    if (all) {
      var open = all.getAttribute("data-details") === "open";
      var list = document.querySelectorAll(all.getAttribute("data-scope") + " details");
      for (var i = 0; i < list.length; i++) list[i].open = open;
      return;
    }
    var link = closest(e.target, "a.jump");
    if (link) openTo(link.getAttribute("href").slice(1));
  });
  window.addEventListener("hashchange", fromHash);
  fromHash();
})();
