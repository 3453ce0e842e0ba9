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
