// Behaviour shared by every console page. Templates carry no inline JavaScript (the CSP forbids
// it, docs/decisions/0011); they declare behaviour with data- attributes that this file reads.
(function () {
  "use strict";

  // <form data-confirm="Delete x?"> asks before submitting; <button|a data-confirm="…"> before
  // the click takes effect. The message is read as text from the attribute, never evaluated, so
  // a name like x'+alert(1)+' is shown, not run.
  function confirmed(el) {
    const message = el.getAttribute("data-confirm");
    return !message || window.confirm(message);
  }

  document.addEventListener(
    "submit",
    function (event) {
      const form = event.target;
      if (form instanceof HTMLFormElement && form.hasAttribute("data-confirm") && !confirmed(form)) {
        event.preventDefault();
        event.stopImmediatePropagation();
      }
    },
    true,
  );

  document.addEventListener(
    "click",
    function (event) {
      const el = event.target instanceof Element ? event.target.closest("a[data-confirm], button[data-confirm]") : null;
      if (el && !confirmed(el)) {
        event.preventDefault();
        event.stopImmediatePropagation();
      }
    },
    true,
  );
})();
