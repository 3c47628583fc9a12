
for (const table of document.querySelectorAll("table.sortable")) {
  const heads = table.tHead.rows[0].cells;
  for (const [column, head] of Array.from(heads).entries()) {
    head.addEventListener("click", () => {
      const dir = head.dataset.dir === "asc" ? "desc" : "asc";
      for (const other of heads) delete other.dataset.dir;
      head.dataset.dir = dir;
      const key = row => {
        const cell = row.cells[column];
        if (cell.dataset.v === undefined) return cell.textContent;
        return cell.dataset.v === "" ? null : Number(cell.dataset.v);
      };
      const body = table.tBodies[0];
      const rows = Array.from(body.rows);
      rows.sort((a, b) => {
        const [x, y] = [key(a), key(b)];
        if (x === null || y === null) return (x === null) - (y === null);
        const order = typeof x === "number" ? x - y : String(x).localeCompare(String(y));
        return dir === "asc" ? order : -order;
      });
      for (const row of rows) body.appendChild(row);
    });
  }
}
document.documentElement.dataset.ready = "yes";
