// report.html: the learner judges statements, the page keeps score, the reveal shows the layers.
// Every text from the data goes through textContent (see el()); nothing is parsed as HTML.
// The page's own words come from DATA.messages (lewisrag/eval/reports/i18n.py), in the page's language:
// t(id, {name: value}) fills a message's {name} placeholders; word(kind, value) names a verdict, category ...
"use strict";
(function () {
  const DATA = JSON.parse(document.getElementById("data").textContent);
  const M = DATA.messages || {};
  const t = (id, vars) => (M[id] === undefined ? id : M[id]).replace(/\{(\w+)\}/g, (all, name) =>
    (vars && vars[name] !== undefined ? String(vars[name]) : all));
  const word = (kind, value) => (M[kind + "." + value] === undefined ? value : M[kind + "." + value]);
  const $ = (id) => document.getElementById(id);
  const state = { q: 0, a: 0, judged: {}, revealed: {} };  // judged["q/a"][i] = true | false

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") node.className = v;
      else if (k === "onclick") node.addEventListener("click", v);
      else node.setAttribute(k, v);
    }
    for (const c of children) {
      if (c === null || c === undefined) continue;
      node.appendChild(typeof c === "string" || typeof c === "number" ? document.createTextNode(String(c)) : c);
    }
    return node;
  }
  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); return node; }
  const key = () => state.q + "/" + state.a;
  const question = () => DATA.questions[state.q];
  const answer = () => question().answers[state.a];
  const pct = (x) => (x === null || x === undefined ? "–" : (100 * x).toFixed(1) + "%");
  const verdictText = (v) => (v === true ? t("supported") : v === false ? t("not_supported") : t("undecided"));
  // A metric as report.md prints it: the digits come formatted from Python (html._answer's "shown"), so both
  // reports round alike (JS's toFixed rounds a half up, Python's format to the even digit).
  const metric = (a, name) => (a.shown && typeof a.shown[name] === "string" ? a.shown[name] : "–");

  function renderPickers() {
    const sel = clear($("question-select"));
    DATA.questions.forEach((q, i) => sel.appendChild(el("option", { value: String(i) }, q.id + ": " + q.question)));
    sel.value = String(state.q);
    sel.disabled = DATA.questions.length < 2;
    sel.onchange = () => { state.q = Number(sel.value); state.a = 0; render(); };
    $("system-label").textContent = DATA.system_label;
    $("judge-info").textContent = t("judge_info", { judge: DATA.judge.name, splitter: DATA.splitter.name || "?",
      version: DATA.splitter.version || "?" });
  }

  function renderSystems() {
    const box = clear($("system-buttons"));
    question().answers.forEach((a, i) => {
      const b = el("button", { type: "button", role: "tab", "data-system": a.system, "aria-selected": String(i === state.a),
        class: i === state.a ? "tab active" : "tab", onclick: () => { state.a = i; render(); } }, a.label || a.system);
      box.appendChild(b);
    });
  }

  function renderQuestion() {
    const q = question(), a = answer();
    $("question-text").textContent = q.category ? t("question_category", { question: q.question, category: word("category", q.category) })
      : q.question;
    $("system-description").textContent = a.description || "";
    $("answer-text").textContent = a.response || t("empty_answer");
  }

  function judge(i, value) {
    const marks = (state.judged[key()] = state.judged[key()] || {});
    marks[i] = value;
    renderStatements();
    renderScore();
  }

  function renderStatements() {
    const a = answer(), marks = state.judged[key()] || {}, shown = !!state.revealed[key()];
    const list = clear($("statements"));
    if (question().category === "not_in_kb") {  // no right content to judge: only a refusal is right
      list.appendChild(el("li", { class: "note" }, t(a.refused ? "nik_refused" : "nik_not_refused")));
      return;
    }
    if (!a.statements.length) list.appendChild(el("li", { class: "muted" }, t(a.refused ? "refuses_no_statements" : "no_statements")));
    a.statements.forEach((s, i) => {
      const cited = (c) => a.contexts.find((x) => x.cite === String(c));  // [2] may be the second context, not id "2"
      const cites = el("span", { class: "cites" }, ...s.citations.map((c) => el("span", { class: "cite",
        title: cited(c) ? t("cites_passage", { id: cited(c).id }) : t("cites_unknown", { id: c }) }, "[" + c + "]")));
      const yes = el("button", { type: "button", class: "judge yes" + (marks[i] === true ? " on" : ""), "aria-pressed": String(marks[i] === true),
        onclick: () => judge(i, true) }, t("supported"));
      const no = el("button", { type: "button", class: "judge no" + (marks[i] === false ? " on" : ""), "aria-pressed": String(marks[i] === false),
        onclick: () => judge(i, false) }, t("not_supported"));
      const item = el("li", { class: "statement", "data-index": String(i) }, el("span", { class: "stext" }, s.text), cites,
        el("span", { class: "buttons" }, yes, no));
      if (shown) {
        const agree = marks[i] === undefined ? "" : marks[i] === s.supported ? t("you_agree") : t("you_differ");
        item.appendChild(el("div", { class: "ref " + (s.supported === true ? "ok" : s.supported === false ? "bad" : "na") },
          t("reference", { verdict: verdictText(s.supported), agree: agree }) + (s.reason ? " — " + s.reason : "")));
      }
      list.appendChild(item);
    });
  }

  function renderScore() {
    const a = answer(), marks = state.judged[key()] || {};
    const judged = Object.keys(marks).map(Number), n = question().category === "not_in_kb" ? 0 : a.statements.length;
    const supported = judged.filter((i) => marks[i]).length;
    $("your-faithfulness").textContent = judged.length ? pct(supported / judged.length) : "–";
    $("your-count").textContent = t("score_count", { supported: supported, judged: judged.length, left: n - judged.length });
    const decided = judged.filter((i) => a.statements[i].supported === true || a.statements[i].supported === false);
    const agree = decided.filter((i) => marks[i] === a.statements[i].supported).length;
    // Shown once every statement is judged (or revealed), so it cannot give the verdicts away one by one.
    const ready = judged.length === n || !!state.revealed[key()];
    $("agreement").textContent = ready ? t("agree", { agree: agree, decided: decided.length }) : t("after_all", { n: n });
    $("agreement").className = ready ? "value" : "value pending";
  }

  function renderPassages() {
    const a = answer(), box = clear($("passages"));
    a.contexts.forEach((c) => box.appendChild(el("article", { class: "passage" + (c.gold ? " gold" : ""), "data-id": c.id },
      el("div", { class: "phead" }, el("span", { class: "pid" }, "#" + c.rank + "  [" + c.cite + "]" + (c.cite === c.id ? "" : "  " + c.id)), el("span", { class: "ptitle" }, c.title || ""),
        c.gold ? el("span", { class: "tag" }, t("gold")) : null),
      el("div", { class: "ptext" }, c.text))));
    a.missing_gold.forEach((g) => box.appendChild(el("article", { class: "passage missing", "data-id": g.id },
      el("div", { class: "phead" }, el("span", { class: "pid" }, "[" + g.id + "]"), el("span", { class: "ptitle" }, g.title || ""),
        el("span", { class: "tag" }, t("gold_missing"))),
      el("div", { class: "ptext" }, g.text === null || g.text === undefined ? t("no_text") : g.text))));
    if (!a.contexts.length && !a.missing_gold.length) box.appendChild(el("p", { class: "muted" }, t("nothing_retrieved")));
  }

  function card(label, value, note) {
    return el("div", { class: "mcard" }, el("span", { class: "label" }, label), el("span", { class: "value" }, value),
      note ? el("span", { class: "muted small" }, note) : null);
  }

  function renderMetrics() {
    const a = answer(), m = a.metrics, why = a.nan_reasons || {}, box = clear($("metric-cards"));
    const cards = ["faithfulness", "context_recall", "answer_completeness", "citation_recall", "citation_precision",
      "recall_at_k", "on_topic_rate"];
    for (const name of question().category === "not_in_kb" ? [] : cards) {
      if (name === "recall_at_k" && !m.recall_at_k) continue;
      box.appendChild(card(t("card." + name), metric(a, name), m[name] === null ? why[name] || "" : ""));
    }
    if (a.refused || question().category === "not_in_kb") {
      box.appendChild(card(t("card.refused"), a.refused ? t("yes") : t("no"), t("must_refuse")));
    }
  }

  function renderChain() {
    const a = answer(), d = a.diagnosis, box = clear($("chain"));
    const cause = (k) => DATA.causes.find((c) => c.key === k) || { key: k, label: k, layers: [k] };
    DATA.layers.forEach((layer, i) => {
      const verdict = d.layers[layer.key] || "n/a";  // the class keeps the key; the text is in the page's language
      const primary = cause(d.primary).layers.includes(layer.key), consequence = (d.consequences || []).includes(layer.key);
      const cls = "layer " + verdict.replace("/", "") + (primary ? " primary" : "") + (consequence ? " consequence" : "");
      const shown = layer.metrics.filter((k) => a.metrics[k] !== null && a.metrics[k] !== undefined)
        .map((k) => word("metric", k) + " " + metric(a, k)).join(" · ");
      if (i) box.appendChild(el("span", { class: "arrow" }, "→"));
      box.appendChild(el("div", { class: cls, "data-layer": layer.key }, el("div", { class: "lname" }, layer.label),
        el("div", { class: "lverdict" }, word("verdict", verdict)), el("div", { class: "muted small" }, shown || t("no_metric")),
        primary ? el("div", { class: "lrole" }, t("primary")) : consequence ? el("div", { class: "lrole" }, t("consequence")) : null));
    });
    const label = (k) => cause(k).label;
    // A not_in_kb answer first: one that fails to refuse has a primary cause too, but its note is the refusal's.
    $("chain-note").textContent = d.expected_refusal ? t(a.refused ? "nik_chain_refused" : "nik_chain_must")
      : d.primary ? t("fix_first", { layer: label(d.primary) }) + (a.expected_primary ? t("expected", { layer: label(a.expected_primary) }) : "")
      : t("all_pass");
  }

  function renderTables() {
    const a = answer(), refs = clear($("references")), cit = clear($("citations"));
    const yn = (v) => el("td", { class: v === true ? "ok" : v === false ? "bad" : "na" }, v === true ? t("yes") : v === false ? t("no") : "–");
    a.reference_statements.forEach((r) => refs.appendChild(el("tr", {}, el("td", {}, r.id), el("td", {}, r.text), yn(r.in_contexts), yn(r.in_answer))));
    if (!a.reference_statements.length) refs.appendChild(el("tr", {}, el("td", { colspan: "4", class: "muted" }, t("no_references"))));
    const verdicts = new Map();  // sentence -> its verdicts in order: a sentence written twice has one per copy
    (a.citation_verdicts || []).forEach((v) => verdicts.set(v.sentence, [...(verdicts.get(v.sentence) || []), v]));
    a.citation_checks.forEach((c) => {
      const v = (verdicts.get(c.sentence) || []).shift();
      cit.appendChild(el("tr", {}, el("td", {}, c.sentence), el("td", {}, v ? v.citations.map((x) => "[" + x + "]").join(" ") : ""),
        el("td", { class: c.status === "PASS" ? "ok" : c.status === "UNVERIFIABLE" ? "na" : "bad", title: c.detail || "" },
          c.status + (c.detail ? ": " + c.detail : "")), v ? yn(v.supported) : el("td", { class: "na" }, "–")));
    });
    if (!a.citation_checks.length) cit.appendChild(el("tr", {}, el("td", { colspan: "4", class: "muted" }, t("no_sentences"))));
    const g = a.granularity, gbox = clear($("granularity"));
    $("granularity-box").hidden = !g || Object.keys(g).length < 2;
    Object.entries(g || {}).forEach(([level, x]) => gbox.appendChild(el("tr", {}, el("td", {}, word("level", level)), el("td", {}, String(x.statements)),
      el("td", {}, String(x.supported)), el("td", {}, pct(x.faithfulness)))));
  }

  function renderReveal() {
    const shown = !!state.revealed[key()];
    $("revealed").hidden = !shown;
    $("reveal").textContent = shown ? t("hide") : t("reveal");
    if (!shown) return;
    renderMetrics();
    renderChain();
    renderTables();
  }

  function renderHeatmap() {
    document.querySelectorAll("section.heatmap").forEach((s) => { s.hidden = s.getAttribute("data-key") !== key(); });
  }

  function render() {
    if (!DATA.questions.length) {  // a run of no questions: say so, with nothing to judge or reveal
      renderPickers();
      clear($("system-buttons"));
      $("question-text").textContent = t("no_questions");
      $("reveal").hidden = true;
      return;
    }
    renderPickers();
    renderSystems();
    renderQuestion();
    renderStatements();
    renderScore();
    renderPassages();
    renderReveal();
    renderHeatmap();
  }

  $("reveal").addEventListener("click", () => {
    state.revealed[key()] = !state.revealed[key()];
    renderStatements();
    renderScore();
    renderReveal();
    if (state.revealed[key()]) $("revealed").scrollIntoView({ block: "start" });
  });
  render();
})();
