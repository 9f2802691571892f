// The live refresh: every few seconds, fetch this page again and swap its live part
// (#live). Skipped while the tab is hidden or the pointer is over that part, so nothing
// moves under a click. A 401 (the login expired) reloads the page, which shows the login.
(function () {
  "use strict";
  var live = document.getElementById("live");
  if (!live) { return; }
  var seconds = Number(live.getAttribute("data-refresh")) || 5;
  function later() { window.setTimeout(refresh, seconds * 1000); }
  function refresh() {
    if (document.hidden || live.matches(":hover")) { later(); return; }
    window.fetch(window.location.href, { credentials: "same-origin", cache: "no-store" })
      .then(function (response) {
        if (response.status === 401) { window.location.reload(); return null; }
        return response.ok ? response.text() : null;
      })
      .then(function (html) {
        if (!html) { return; }
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("live");
        if (fresh) { live.innerHTML = fresh.innerHTML; }
      })
      .catch(function () { /* the server is away: try again later */ })
      .then(later);
  }
  later();
}());
