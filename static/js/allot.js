// Small behaviours every page may use, as data attributes (the Content-Security-Policy allows no inline script).
document.addEventListener("change", function (event) {
  // <select data-autosubmit>: choosing an option submits its form.
  if (event.target.matches("select[data-autosubmit]") && event.target.form) event.target.form.submit();
});
document.addEventListener("click", function (event) {
  // <a data-back>: back to the previous page when there is one (the link's href otherwise).
  var link = event.target.closest("a[data-back]");
  if (link && window.history.length > 1) {
    event.preventDefault();
    window.history.back();
  }
});
document.addEventListener("submit", function (event) {
  // <form data-confirm="…">: asks first (cancelling a job cannot be undone); no submission unless confirmed.
  var form = event.target.closest("form[data-confirm]");
  if (form && !window.confirm(form.dataset.confirm)) event.preventDefault();
});
