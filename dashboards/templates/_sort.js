document.querySelectorAll("table.sortable").forEach(function (tbl) {
  tbl.querySelectorAll("thead th").forEach(function (th, col) {
    th.addEventListener("click", function () {
      var asc = th.getAttribute("aria-sort") !== "ascending";
      tbl.querySelectorAll("thead th").forEach(function (o) { o.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", asc ? "ascending" : "descending");
      var body = tbl.tBodies[0];
      var rows = Array.prototype.slice.call(body.rows);
      var key = function (r) {
        var k = r.cells[col] ? r.cells[col].textContent.trim() : "";
        return k === "n/a" ? "" : k;  // an undefined number sorts with the blanks
      };
      var numeric = rows.every(function (r) {
        var k = key(r);
        return k === "" || !isNaN(Number(k));
      });
      rows.sort(function (ra, rb) {
        var a = key(ra), b = key(rb);
        if (a === "" || b === "") { return (a === "") - (b === ""); }  // blanks last
        var d = numeric ? Number(a) - Number(b) : a.localeCompare(b, undefined, {numeric: true});
        return asc ? d : -d;
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
});
