// Formatting for the console (console.js), kept apart from the page so
// that make test checks it in node (httpgateway's TestConsoleFormat): pure
// functions of their arguments, no DOM.
"use strict";

// seconds reads a protobuf Duration as JSON spells it ("2.812s").
function seconds(d) {
  const m = /^(-?\d+(?:\.\d+)?)s$/.exec(String(d == null ? "" : d));
  return m ? Number(m[1]) : null;
}

// human spells a number of seconds for people: "420 ms", "2.8 s",
// "3 min 5 s", "1 h 2 min". Each unit is chosen after rounding, so 0.9996 s
// is "1.0 s" and 3599.6 s is "1 h 0 min", never "1000 ms" or "59 min 60 s".
function human(sec) {
  if (sec == null || !isFinite(sec)) return "–";
  sec = Math.max(0, sec); // clocks of different hosts can disagree a little
  if (Math.round(sec * 1000) < 1000) return Math.round(sec * 1000) + " ms";
  if (Math.round(sec * 10) < 600) return (Math.round(sec * 10) / 10).toFixed(1) + " s";
  const s = Math.round(sec);
  if (s < 3600) return Math.floor(s / 60) + " min " + (s % 60) + " s";
  const m = Math.round(sec / 60);
  return Math.floor(m / 60) + " h " + (m % 60) + " min";
}

// at reads a protobuf Timestamp as JSON spells it (RFC 3339, up to nine
// fractional digits) into milliseconds; Date.parse is only required to read
// three.
function at(ts) {
  return ts ? Date.parse(String(ts).replace(/(\.\d{3})\d+/, "$1")) : NaN;
}

// sqlTokens splits SQL into [class, text] pairs, class one of keyword,
// string, number, comment or "" for the text between; joined, the texts are
// the SQL unchanged. A keyword inside a string, a comment or a longer name
// (order_id, selected) stays part of it.
function sqlTokens(sql) {
  const token = new RegExp("('(?:[^']|'')*')|(\"(?:[^\"]|\"\")*\")|(--[^\\n]*|/\\*[\\s\\S]*?\\*/)|(\\b\\d+(?:\\.\\d+)?\\b)|(\\b(?:" +
    "SELECT|FROM|WHERE|GROUP|BY|ORDER|HAVING|LIMIT|OFFSET|JOIN|LEFT|RIGHT|INNER|OUTER|FULL|CROSS|ON|USING|AS|AND|OR|NOT|IN|IS|NULL|" +
    "LIKE|BETWEEN|CASE|WHEN|THEN|ELSE|END|DISTINCT|UNION|ALL|WITH|RECURSIVE|DESC|ASC|INSERT|UPDATE|DELETE|INTO|VALUES|SET|" +
    "CREATE|TABLE|DROP|ALTER|EXISTS|OVER|PARTITION|CAST)\\b)", "gi");
  const out = [];
  let from = 0;
  for (const m of sql.matchAll(token)) {
    if (m.index > from) out.push(["", sql.slice(from, m.index)]);
    out.push([m[1] || m[2] ? "string" : m[3] ? "comment" : m[4] ? "number" : "keyword", m[0]]);
    from = m.index + m[0].length;
  }
  if (from < sql.length) out.push(["", sql.slice(from)]);
  return out;
}
