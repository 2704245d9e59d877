// cronq dashboard: live refresh of <main> and the display zone of times. No framework, no
// build step; the server renders everything (escaped) and this only swaps it in.
(function () {
  "use strict";
  var ZONE_KEY = "cronq.zone";
  var REFRESH_MS = 2000;

  function zoneChoice() {
    try { return localStorage.getItem(ZONE_KEY) || "utc"; } catch (e) { return "utc"; }
  }

  function pad(n) { return (n < 10 ? "0" : "") + n; }

  // An instant as YYYY-MM-DD HH:MM:SS in `zone` (an IANA name or undefined for the
  // browser's), followed by the zone's name: always absolute.
  function format(date, zone) {
    var opts = { year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit",
      minute: "2-digit", second: "2-digit", hourCycle: "h23", timeZoneName: "short" };
    if (zone) { opts.timeZone = zone; }
    var parts = {};
    new Intl.DateTimeFormat("en-CA", opts).formatToParts(date).forEach(function (p) { parts[p.type] = p.value; });
    return parts.year + "-" + parts.month + "-" + parts.day + " " + parts.hour + ":" +
      parts.minute + ":" + parts.second + " " + (parts.timeZoneName || "");
  }

  function showTimes(root) {
    var choice = zoneChoice();
    var times = root.querySelectorAll("time[datetime]");
    for (var i = 0; i < times.length; i++) {
      var t = times[i];
      var iso = t.getAttribute("datetime");
      var date = new Date(iso);
      if (isNaN(date.getTime())) { continue; }
      if (choice === "utc") {
        t.textContent = iso;
      } else if (choice === "browser") {
        t.textContent = format(date, undefined);
      } else {
        t.textContent = format(date, t.getAttribute("data-zone") || "UTC");
      }
      t.title = iso;
    }
  }

  // Whether the operator is typing in a form of <main> (then it is not replaced).
  function busy(main) {
    var active = document.activeElement;
    if (active && main.contains(active) && /^(INPUT|TEXTAREA|SELECT)$/.test(active.tagName)) { return true; }
    var fields = main.querySelectorAll("input[type=text], input[type=search], textarea, input[type=checkbox][name=key], input[type=checkbox][name=confirm]");
    for (var i = 0; i < fields.length; i++) {
      var f = fields[i];
      if (f.type === "checkbox" ? f.checked : f.value !== f.defaultValue) { return true; }
    }
    return false;
  }

  function refresh(main) {
    if (document.hidden || busy(main)) { return; }
    fetch(location.href, { headers: { "X-Cronq-Fragment": "1" }, credentials: "same-origin" })
      .then(function (r) { if (!r.ok && r.status !== 404) { throw new Error("HTTP " + r.status); } return r.text(); })
      .then(function (html) {
        if (busy(main)) { return; }
        main.innerHTML = html;
        showTimes(main);
        document.body.classList.remove("offline");
      })
      .catch(function () { document.body.classList.add("offline"); });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var select = document.getElementById("zone");
    if (select) {
      select.value = zoneChoice();
      select.addEventListener("change", function () {
        try { localStorage.setItem(ZONE_KEY, select.value); } catch (e) { /* private mode */ }
        showTimes(document);
      });
    }
    showTimes(document);
    var main = document.querySelector("main[data-live]");
    if (main) { setInterval(function () { refresh(main); }, REFRESH_MS); }
  });
})();
