// The web console: a page per hash (#/queues, #/dead-letters/vhost/name ...),
// everything read from and done through the management HTTP API with the
// logged-in user's credentials.  Plain DOM, no build step; the charts are
// uPlot's (vendor/, shipped with the package).  A page's address is a link:
// opened before login, the page shows once the user is in; a queue's
// workbench keeps its filter in the address (#/dead-letters/vhost/name?
// reason=expired&body=sku), as the API's query names it.
"use strict";
(() => {
  const POLL_MS = 5000;
  const TASK_POLL_MS = 500;
  const REASONS = ["rejected", "expired", "maxlen", "delivery_limit"];
  const STORED = "amqp-console-auth";
  // The minutes the charts cover: the broker keeps ten for the overview,
  // five for each queue (sample_retention_policies), a sample every 5 s.
  const OVERVIEW_RANGE = "lengths_age=600&lengths_incr=5&msg_rates_age=600&msg_rates_incr=5";
  const QUEUE_RANGE = "lengths_age=300&lengths_incr=5&msg_rates_age=300&msg_rates_incr=5";
  let auth = sessionStorage.getItem(STORED);
  let me = null;
  let poller = null;
  let viewToken = 0;  // a view's late answers are dropped once another view is shown
  let leaving = [];  // what the shown view lets go of when another is shown
  let routeQuery = new URLSearchParams();  // what follows `?` in the shown page's hash

  // ---- small DOM helpers (text is always set as text, never as HTML) ----------

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else if (key === "text") node.textContent = value;
      else if (key in node && typeof value !== "string") node[key] = value;
      else node.setAttribute(key, value === true ? "" : value);
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : String(child));
    }
    return node;
  }
  const $ = (selector, root = document) => root.querySelector(selector);
  const enc = encodeURIComponent;
  const compact = (value) => (value && Object.keys(value).length ? JSON.stringify(value) : "");
  const pad = (n) => String(n).padStart(2, "0");
  // A time as people read it: local, to the second, always in one form
  // (with the offset from UTC where it stands alone).
  function dateTime(seconds, withZone = false) {
    const d = new Date(seconds * 1000);
    let text = `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
      `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
    if (withZone) {
      const east = -d.getTimezoneOffset();
      text += ` ${east < 0 ? "-" : "+"}${pad(Math.floor(Math.abs(east) / 60))}:${pad(Math.abs(east) % 60)}`;
    }
    return text;
  }
  const when = (seconds) => (seconds ? dateTime(seconds) : "");
  const number = (value) => (Number.isInteger(value) ? String(value)
    : Math.abs(value) >= 10 ? value.toFixed(1) : value.toFixed(2));
  const rateText = (details) => (details && typeof details.rate === "number"
    ? number(details.rate) + "/s" : "");

  // A button that asks for a second click before doing something destructive.
  function confirming(label, action, attrs = {}) {
    let armed = false;
    const button = el("button", {type: "button", class: "danger", ...attrs, text: label});
    button.addEventListener("click", async (event) => {
      event.stopPropagation();
      if (!armed) {
        armed = true;
        button.textContent = "Confirm " + label.toLowerCase();
        return;
      }
      armed = false;
      button.textContent = label;
      await action();
    });
    return button;
  }

  // ---- the API ---------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, reason) { super(reason); this.status = status; }
  }

  function basic(username, password) {
    const bytes = new TextEncoder().encode(username + ":" + password);
    return btoa(String.fromCharCode(...bytes));
  }

  async function api(method, path, body, credentials = auth) {
    const headers = {"Authorization": "Basic " + credentials};
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const response = await fetch(path, {method, headers, credentials: "omit",
      body: body === undefined ? undefined : JSON.stringify(body)});
    const text = await response.text();
    let data = text;
    try { data = text ? JSON.parse(text) : null; } catch (_) { /* plain text */ }
    if (!response.ok) {
      const reason = data && data.reason ? data.reason : `${response.status} ${response.statusText}`;
      if (response.status === 401 && data && data.error === "not_authorized") logout();
      throw new ApiError(response.status, reason);
    }
    return data;
  }

  // ---- charts of the broker's samples ------------------------------------------

  // Each *_details object of the API carries `samples` (newest first) when
  // asked for a range.  Lines of one chart share the timestamps of its range.
  // `perSecond`: the samples are counters, charted as their rate between
  // neighbouring samples; else as they are (queue depths).
  function chartData(detailsList, perSecond) {
    const first = detailsList.find((d) => d && d.samples && d.samples.length > 1);
    if (!first) return null;
    const times = first.samples.map((s) => s.timestamp).reverse();
    const columns = detailsList.map((d) => {
      const byTime = new Map(((d && d.samples) || []).map((s) => [s.timestamp, s.sample]));
      return times.map((t) => (byTime.has(t) ? byTime.get(t) : null));
    });
    if (!perSecond) return [times.map((t) => t / 1000), ...columns];
    return [times.slice(1).map((t) => t / 1000), ...columns.map((column) => column.slice(1).map(
      (value, i) => (value === null || column[i] === null ? null
        : Math.max(0, ((value - column[i]) * 1000) / (times[i + 1] - times[i])))))];
  }

  // What a counter rose by over the last `seconds` of its samples.
  function risen(details, seconds) {
    const samples = (details && details.samples) || [];
    if (!samples.length) return null;
    const newest = samples[0];
    const older = samples.find((s) => s.timestamp <= newest.timestamp - seconds * 1000) ||
      samples[samples.length - 1];
    return newest.sample - older.sample;
  }

  // A time-series chart (uPlot) drawn from chartData; `lines`: [{label, colour}].
  // `span`: the seconds the time axis covers, ending at the newest sample.
  function chart(id, title, unit, span) {
    const box = el("div", {class: "chart", id});
    const empty = el("p", {class: "muted", id: id + "-waiting",
      text: "Waiting for the broker's next samples (one every 5 seconds)."});
    const node = el("div", {class: "card chart-card"}, el("h2", {text: title}), empty, box);
    let plot = null;
    const size = () => ({width: Math.max(240, box.clientWidth), height: 200});
    const axis = {stroke: "#5c6b7a", grid: {stroke: "#e3e8ec", width: 1}, ticks: {stroke: "#d6dde4"}};
    leaving.push(() => { if (plot) plot.destroy(); plot = null; });
    return {
      node,
      draw(lines, data) {
        empty.hidden = Boolean(data);
        if (!data) return;
        box.dataset.points = String(data[0].length);
        if (plot) { plot.setData(data); return; }
        plot = new uPlot({
          ...size(),
          cursor: {drag: {x: false, y: false}},
          scales: {x: {time: true, range: (_u, _min, max) => [max - span, max]},
            y: {range: (_u, _min, max) => [0, max > 0 ? max * 1.1 : 1]}},
          axes: [{...axis, space: 90, values: (_u, ticks) => ticks.map((t) => dateTime(t)
            .slice(11, ticks.every((at) => at % 60 === 0) ? 16 : 19))},
            {...axis, size: 60, values: (_u, ticks) => ticks.map((v) => number(v) + unit)}],
          series: [{value: (_u, v) => (v === null ? "" : dateTime(v))},
            ...lines.map((line) => ({label: line.label, stroke: line.colour, width: 2, dash: line.dash,
              points: {show: false}, value: (_u, v) => (v === null ? "–" : number(v) + unit)}))],
        }, data, box);
        const observer = new ResizeObserver(() => { if (plot) plot.setSize(size()); });
        observer.observe(box);
        leaving.push(() => observer.disconnect());
      },
    };
  }

  const RATE_LINES = [
    {key: "publish", label: "Publish", colour: "#1f5fbf"},
    {key: "confirm", label: "Confirm", colour: "#0f9fb5"},
    {key: "deliver_get", label: "Deliver / get", colour: "#2e9a3a"},
    {key: "redeliver", label: "Redelivered", colour: "#d08600"},
    {key: "ack", label: "Ack", colour: "#8a4fc7"},
    {key: "return_unroutable", label: "Unroutable, returned", colour: "#9c5b3b"},
    {key: "drop_unroutable", label: "Unroutable, dropped", colour: "#7a7a7a"},
  ];
  const LENGTH_LINES = [
    {key: "messages_ready", label: "Ready", colour: "#1f5fbf"},
    {key: "messages_unacknowledged", label: "Unacked", colour: "#d08600"},
    {key: "messages", label: "Total", colour: "#c8322c", dash: [6, 4]},
  ];
  const REASON_LINES = [
    {key: "rejected", label: "rejected", colour: "#c8322c"},
    {key: "expired", label: "expired", colour: "#d08600"},
    {key: "maxlen", label: "maxlen", colour: "#8a4fc7"},
    {key: "delivery_limit", label: "delivery_limit", colour: "#1f5fbf"},
  ];

  // ---- a sortable, filterable table --------------------------------------------

  // columns: [{title, value(row) -> sortable value, show(row) -> node/text, num}]
  function table(id, columns, options = {}) {
    let rows = [];
    let sortBy = options.sortBy ?? 0;
    let descending = false;
    const filter = el("input", {type: "search", placeholder: "Filter", class: "filter",
      id: id + "-filter", oninput: draw});
    const head = el("tr");
    const body = el("tbody");
    const wrap = el("div", {class: "card"},
      options.filterable === false ? null : el("div", {class: "toolbar"}, filter),
      el("table", {id}, el("thead", {}, head), body),
      el("p", {class: "muted empty", hidden: true, text: options.empty || "Nothing here."}));
    columns.forEach((column, index) => {
      head.append(el("th", {class: column.num ? "num" : "", "data-column": column.title,
        onclick: () => { descending = sortBy === index ? !descending : false; sortBy = index; draw(); }},
      column.title));
    });
    function draw() {
      [...head.children].forEach((th, index) => {
        th.classList.toggle("sorted", index === sortBy);
        th.classList.toggle("desc", index === sortBy && descending);
      });
      const wanted = filter.value.trim().toLowerCase();
      const shown = rows.filter((row) => !wanted || columns.some((c) =>
        String(c.value(row) ?? "").toLowerCase().includes(wanted)));
      const key = columns[sortBy].value;
      shown.sort((a, b) => {
        const x = key(a), y = key(b);
        const order = typeof x === "number" && typeof y === "number" ? x - y
          : String(x ?? "").localeCompare(String(y ?? ""));
        return descending ? -order : order;
      });
      body.replaceChildren(...shown.map((row) => {
        const tr = el("tr", options.rowAttrs ? options.rowAttrs(row) : {});
        for (const column of columns) {
          const shownValue = column.show ? column.show(row) : column.value(row);
          tr.append(el("td", {class: column.num ? "num" : ""}, shownValue ?? ""));
        }
        return tr;
      }));
      $(".empty", wrap).hidden = shown.length > 0;
    }
    return {node: wrap, set(newRows) { rows = newRows; draw(); }};
  }

  // One line of text, cut with an ellipsis where the column ends (the
  // whole of it in the tooltip).
  const clip = (text, kind = "") => el("div", {class: ("clip " + kind).trim(), title: text, text});

  function errorLine(id) { return el("p", {class: "error", id, role: "alert"}); }
  function showError(node, error) { node.textContent = error ? error.message || String(error) : ""; }

  // ---- views ---------------------------------------------------------------------

  const views = {};

  const tile = (label, value, id) => el("div", {class: "tile", id},
    el("div", {class: "n", text: value}), el("div", {class: "l", text: label}));

  // Deaths by reason: a chart per second, and a tile per reason with the
  // dead letters of the last minute and since the broker started.
  function deadLetterTiles(counts, details) {
    return REASONS.map((reason) => {
      const lastMinute = risen(details[reason], 60);
      return tile(`${reason}: ${counts[reason] ?? 0} in all`,
        lastMinute === null ? "" : String(lastMinute), "dead-" + reason);
    });
  }

  views.overview = (root) => {
    const tiles = el("div", {class: "tiles", id: "overview-tiles"});
    const rateTiles = el("div", {class: "tiles", id: "overview-rates"});
    const deadTiles = el("div", {class: "tiles", id: "overview-dead-letters"});
    const alarms = el("div", {id: "overview-alarms"});
    // Dead letter queues whose alerts fire (the broker evaluates the
    // shipped Prometheus rules' conditions itself).
    const alerting = el("div", {id: "overview-dead-letter-alerts"});
    const listeners = el("div", {id: "overview-listeners"});
    // The cluster's members (a single broker is a cluster of one), for users
    // who may see nodes (monitoring, administrator).
    // A single broker's node names no role: it leads a cluster of one.
    const nodes = table("overview-nodes", [
      {title: "Node", value: (n) => n.name},
      {title: "Role", value: (n) => n.role ?? "leader"},
      {title: "In sync", value: (n) => (n.in_sync ?? true ? "yes" : "no")},
      {title: "Behind (frames)", value: (n) => n.replication_lag ?? (n.role ? -1 : 0),
        show: (n) => (n.replication_lag ?? (n.role ? "?" : 0)), num: true},
    ], {filterable: false, empty: "No nodes to show."});
    const nodesCard = el("div", {id: "overview-cluster", hidden: true},
      el("h2", {text: "Nodes"}), nodes.node);
    const depth = chart("overview-depth-chart", "Queued messages", "", 600);
    const rates = chart("overview-rates-chart", "Message rates", "/s", 600);
    const dead = chart("overview-dead-chart", "Dead-lettered, by reason", "/s", 600);
    root.append(el("h1", {text: "Overview"}), alarms, alerting, el("h2", {text: "Totals"}), tiles,
      el("div", {class: "charts"}, depth.node, rates.node),
      el("h2", {text: "Message rates now"}), rateTiles,
      el("div", {class: "charts"}, dead.node, el("div", {class: "card"},
        el("h2", {text: "Dead letters in the last minute, by reason"}), deadTiles)),
      nodesCard, listeners);
    return async () => {
      const o = await api("GET", "/api/overview?" + OVERVIEW_RANGE);
      try {
        nodes.set(await api("GET", "/api/nodes"));
        nodesCard.hidden = false;
      } catch (error) {
        nodesCard.hidden = true;  // not a monitor: the API says no
      }
      const t = o.object_totals, q = o.queue_totals, m = o.message_stats;
      tiles.replaceChildren(tile("Connections", t.connections), tile("Channels", t.channels),
        tile("Exchanges", t.exchanges), tile("Queues", t.queues, "total-queues"),
        tile("Consumers", t.consumers), tile("Ready", q.messages_ready, "total-ready"),
        tile("Unacked", q.messages_unacknowledged), tile("Messages", q.messages));
      const rateLines = RATE_LINES.filter((line) => m[line.key + "_details"]);
      rateTiles.replaceChildren(...rateLines.map((line) =>
        tile(line.label, rateText(m[line.key + "_details"]), "rate-" + line.key)));
      depth.draw(LENGTH_LINES, chartData(LENGTH_LINES.map((l) => q[l.key + "_details"]), false));
      rates.draw(rateLines, chartData(rateLines.map((l) => m[l.key + "_details"]), true));
      dead.draw(REASON_LINES, chartData(REASON_LINES.map((l) => o.dead_lettered_details[l.key]), true));
      deadTiles.replaceChildren(...deadLetterTiles(o.dead_lettered, o.dead_lettered_details));
      const archive = o.dead_letter_archive || {};
      alarms.replaceChildren(...(o.alarms && o.alarms.length
        ? o.alarms.map((a) => el("span", {class: "alarm", text: `${a} alarm: publishers are blocked`}))
        : [el("span", {class: "ok", text: "No resource alarms."})]),
        ...(archive.problem ? [el("span", {class: "alarm", id: "overview-archive-problem",
          text: `Dead-letter archive: ${archive.problem}`})] : []));
      const firing = o.dead_letter_alerts || [];
      alerting.replaceChildren(...(firing.length
        ? [el("h2", {text: "Dead letter queues alerting"}),
          el("ul", {}, ...firing.map((a) => el("li", {class: "alarm dead-letter-alert"},
            el("a", {href: queueHref({vhost: a.vhost, name: a.queue}), text: a.queue}),
            ` (${a.vhost}): ${a.alerts.join(", ")}`)))]
        : [el("span", {class: "ok", text: "No dead-letter alerts."})]));
      listeners.replaceChildren(...(o.listeners ? [el("h2", {text: "Listeners"}),
        el("table", {}, el("tr", {}, el("th", {text: "Protocol"}), el("th", {text: "Port"})),
          ...o.listeners.map((l) => el("tr", {}, el("td", {text: l.protocol}),
            el("td", {text: l.port}))))] : []));
    };
  };

  const queueHref = (q) => `#/queues/${enc(q.vhost)}/${enc(q.name)}`;
  // A stream keeps what it is read: its messages are browsed by offset and
  // time, and its list of them is its log, not a queue's ready messages.
  const streamBadge = (q) => (q.type === "stream"
    ? el("span", {class: "badge stream-badge", "data-stream": q.name, text: "stream"}) : null);
  const byteText = (n) => (n >= 1 << 30 ? number(n / (1 << 30)) + " GiB"
    : n >= 1 << 20 ? number(n / (1 << 20)) + " MiB" : n >= 1 << 10 ? number(n / (1 << 10)) + " KiB"
      : `${n} B`);

  views.queues = (root, vhost, name) => {
    if (name !== undefined) return queuePage(root, vhost, name);
    const dead = (q) => Object.values(q.dead_lettered || {}).reduce((a, b) => a + b, 0);
    const rate = (q, key) => q.message_stats?.[key + "_details"]?.rate;
    const t = table("queues", [
      {title: "Virtual host", value: (q) => q.vhost},
      {title: "Name", value: (q) => q.name,
        show: (q) => [el("a", {href: queueHref(q), text: q.name}), streamBadge(q)]},
      {title: "Type", value: (q) => q.type},
      {title: "Policy", value: (q) => q.policy || ""},
      {title: "Arguments", value: (q) => compact(q.arguments)},
      {title: "Consumers", value: (q) => q.consumers, num: true},
      {title: "Ready", value: (q) => q.messages_ready, num: true},
      {title: "Unacked", value: (q) => q.messages_unacknowledged, num: true},
      {title: "Total", value: (q) => q.messages, num: true},
      {title: "Publish", value: (q) => rate(q, "publish") ?? -1,
        show: (q) => rateText(q.message_stats?.publish_details), num: true},
      {title: "Deliver", value: (q) => rate(q, "deliver_get") ?? -1,
        show: (q) => rateText(q.message_stats?.deliver_get_details), num: true},
      {title: "Dead-lettered", value: dead, num: true},
    ], {sortBy: 1, empty: "No queues you may see."});
    root.append(el("h1", {text: "Queues"}), t.node);
    return async () => t.set(await api("GET", "/api/queues"));
  };

  // One queue as RabbitMQ's queue page shows it, with its dead letters.
  function queuePage(root, vhost, name) {
    const base = `/api/queues/${enc(vhost)}/${enc(name)}`;
    const tiles = el("div", {class: "tiles", id: "queue-tiles"});
    const about = el("table", {id: "queue-about", class: "facts"});
    const deadTable = el("table", {id: "queue-dead-letters", class: "facts"});
    const depth = chart("queue-depth-chart", "Queued messages", "", 300);
    const rates = chart("queue-rates-chart", "Message rates", "/s", 300);
    const dead = chart("queue-dead-chart", "Dead-lettered, by reason", "/s", 300);
    const lines = RATE_LINES.filter((l) => ["publish", "deliver_get", "ack"].includes(l.key));
    const row = (label, value) => el("tr", {}, el("th", {text: label}), el("td", {text: value}));
    // A stream's log: its size, segments, offsets, and where each consumer reads.
    const streamTiles = el("div", {class: "tiles", id: "stream-tiles"});
    const consumers = table("stream-consumers", [
      {title: "Consumer", value: (c) => c.tag},
      {title: "Next offset", value: (c) => c.offset, num: true},
      {title: "Behind", value: (c) => c.behind, num: true},
    ], {filterable: false, sortBy: 0, empty: "No consumer reads this stream."});
    const streamCard = el("div", {class: "card", id: "stream-log", hidden: true},
      el("h2", {text: "Stream"}), streamTiles, el("h2", {text: "Consumers' offsets"}), consumers.node);
    const browse = el("a", {href: `#/dead-letters/${enc(vhost)}/${enc(name)}`, id: "queue-browse",
      text: "Browse its messages in the workbench"});
    root.append(el("p", {}, el("a", {href: "#/queues", text: "Queues"}), " / "),
      el("h1", {id: "queue-title", text: `${name} (${vhost})`}),
      el("p", {}, browse), streamCard,
      tiles, el("div", {class: "charts"}, depth.node, rates.node),
      el("div", {class: "charts"}, dead.node,
        el("div", {class: "card"}, el("h2", {text: "Dead letters"}), deadTable)),
      el("div", {class: "card"}, el("h2", {text: "Settings"}), about));
    return async () => {
      const q = await api("GET", `${base}?${QUEUE_RANGE}`);
      const m = q.message_stats || {};
      if (q.type === "stream" && q.stream) {
        const s = q.stream;
        const offset = (value) => (value === null || value === undefined ? "none" : String(value));
        streamCard.hidden = false;
        browse.textContent = "Browse it by offset and time in the workbench";
        streamTiles.replaceChildren(tile("Messages", q.messages, "stream-messages-count"),
          tile("Size on disk", byteText(s.size_bytes), "stream-size"),
          tile("Segments", s.segments, "stream-segments"),
          tile("First offset", offset(s.first_offset), "stream-first-offset"),
          tile("Last offset", offset(s.last_offset), "stream-last-offset"),
          tile("Removed by retention", s.removed_by_retention, "stream-retained"));
        consumers.set(Object.entries(s.consumer_offsets || {}).map(([tag, at]) =>
          ({tag, offset: at, behind: Math.max(0, s.next_offset - at)})));
      }
      tiles.replaceChildren(tile("Ready", q.messages_ready, "queue-ready"),
        tile("Unacked", q.messages_unacknowledged, "queue-unacked"),
        tile("Total", q.messages, "queue-total"), tile("Delayed", q.messages_delayed),
        tile("Paged out", q.messages_paged_out), tile("Consumers", q.consumers),
        ...lines.map((l) => tile(l.label, rateText(m[l.key + "_details"]), "queue-rate-" + l.key)));
      depth.draw(LENGTH_LINES, chartData(LENGTH_LINES.map((l) => q[l.key + "_details"]), false));
      rates.draw(lines, chartData(lines.map((l) => m[l.key + "_details"]), true));
      dead.draw(REASON_LINES, chartData(REASON_LINES.map((l) => q.dead_lettered_details[l.key]), true));
      const dropped = Object.entries(q.dead_letter_dropped || {}).filter(([, n]) => n > 0);
      deadTable.replaceChildren(
        ...REASONS.map((reason) => row(`Dead-lettered, ${reason}`, q.dead_lettered[reason])),
        row("Died with nowhere to go", dropped.length
          ? dropped.map(([cause, n]) => `${n} ${cause}`).join(", ") : "0"),
        row("Expired", q.expired), row("Held for an at-least-once target", q.dead_letter_held));
      about.replaceChildren(row("Type", q.type), row("Durable", q.durable ? "yes" : "no"),
        row("Auto-delete", q.auto_delete ? "yes" : "no"),
        row("Exclusive", q.exclusive ? "yes" : "no"),
        row("Arguments", compact(q.arguments) || "none"),
        row("Policy", q.policy || "none"), row("Operator policy", q.operator_policy || "none"),
        row("Effective policy definition", compact(q.effective_policy_definition) || "none"),
        row("Single active consumer", q.single_active_consumer_tag || ""),
        ...quorum43Rows(q, row));
    };
  }

  // What RabbitMQ 4.3 shows of its quorum queues (rabbit_quorum_queue:handle_tick/3):
  // present only for a queue under 4.3's semantics.
  function quorum43Rows(q, row) {
    if (q.delivery_limit === undefined) return [];
    const when = (ms) => (ms ? new Date(ms).toISOString() : "none waiting");
    const rows = [row("Delivery limit", String(q.delivery_limit)),
      row("Delayed retry", q.delayed_retry),
      row("Next delayed retry at", when(q.next_delayed_at)),
      row("Last delayed retry at", when(q.last_delayed_at))];
    if (q.messages_by_priority !== undefined) {
      const levels = Object.entries(q.messages_by_priority)
        .sort(([a], [b]) => Number(b) - Number(a)).map(([p, n]) => `${p}: ${n}`);
      rows.push(row("Ready by priority", levels.join(", ") || "none"),
        row("Returned, served first", String(q.messages_ready_returned ?? 0)));
    }
    return rows;
  }

  views.exchanges = (root) => {
    const t = table("exchanges", [
      {title: "Virtual host", value: (x) => x.vhost},
      {title: "Name", value: (x) => x.name || "(AMQP default)"},
      {title: "Type", value: (x) => x.type},
      {title: "Durable", value: (x) => (x.durable ? "yes" : "no")},
      {title: "Auto-delete", value: (x) => (x.auto_delete ? "yes" : "no")},
      {title: "Internal", value: (x) => (x.internal ? "yes" : "no")},
      {title: "Policy", value: (x) => x.policy || ""},
      {title: "Arguments", value: (x) => compact(x.arguments)},
      // The delayed-message plugin's count, on x-delayed-message exchanges only.
      {title: "Delayed", value: (x) => x.messages_delayed ?? "", num: true},
    ], {sortBy: 1});
    root.append(el("h1", {text: "Exchanges"}), t.node);
    return async () => t.set(await api("GET", "/api/exchanges"));
  };

  views.bindings = (root) => {
    const t = table("bindings", [
      {title: "Virtual host", value: (b) => b.vhost},
      {title: "Source", value: (b) => b.source || "(AMQP default)"},
      {title: "Destination", value: (b) => b.destination},
      {title: "Kind", value: (b) => b.destination_type},
      {title: "Routing key", value: (b) => b.routing_key},
      {title: "Arguments", value: (b) => compact(b.arguments)},
    ], {sortBy: 1});
    root.append(el("h1", {text: "Bindings"}), t.node);
    return async () => t.set(await api("GET", "/api/bindings"));
  };

  views.connections = (root) => {
    const error = errorLine("connections-error");
    const refresh = () => update();
    const connections = table("connections", [
      {title: "Name", value: (c) => c.name},
      {title: "User", value: (c) => c.user},
      {title: "Virtual host", value: (c) => c.vhost},
      {title: "Client", value: (c) => [c.client_properties?.product,
        c.client_properties?.version].filter(Boolean).join(" ")},
      {title: "Channels", value: (c) => c.channels, num: true},
      {title: "Heartbeat", value: (c) => c.timeout, num: true},
      {title: "", value: () => "", show: (c) => confirming("Close", async () => {
        try {
          await api("DELETE", `/api/connections/${enc(c.name)}`);
          showError(error, null);
        } catch (exc) { showError(error, exc); }
        refresh();
      }, {"data-connection": c.name})},
    ], {empty: "No connections you may see."});
    const channels = table("channels", [
      {title: "Channel", value: (c) => c.name},
      {title: "User", value: (c) => c.user},
      {title: "Virtual host", value: (c) => c.vhost},
      {title: "Consumers", value: (c) => c.consumer_count, num: true},
      {title: "Unacked", value: (c) => c.messages_unacknowledged, num: true},
      {title: "Prefetch", value: (c) => c.prefetch_count, num: true},
      {title: "Mode", value: (c) => [c.confirm && "confirm", c.transactional && "transactional"]
        .filter(Boolean).join(", ")},
    ], {empty: "No channels you may see."});
    root.append(el("h1", {text: "Connections"}), error, connections.node,
      el("h2", {text: "Channels"}), channels.node);
    const update = async () => {
      const [conns, chans] = await Promise.all([api("GET", "/api/connections"),
        api("GET", "/api/channels")]);
      connections.set(conns);
      channels.set(chans);
    };
    return update;
  };

  views.policies = (root) => {
    const error = errorLine("policy-error");
    const done = el("p", {class: "ok", id: "policy-done"});
    const vhost = el("select", {name: "vhost", id: "policy-vhost"});
    const form = el("form", {class: "card", id: "policy-form"},
      el("h2", {text: "Set a policy"}),
      el("div", {class: "grid"},
        el("label", {}, "Virtual host", vhost),
        el("label", {}, "Name", el("input", {name: "name", id: "policy-name", required: true})),
        el("label", {}, "Pattern", el("input", {name: "pattern", id: "policy-pattern", value: ".*"})),
        el("label", {}, "Apply to", el("select", {name: "apply-to", id: "policy-apply-to"},
          ...["all", "queues", "exchanges", "classic_queues", "quorum_queues", "streams"]
            .map((v) => el("option", {value: v, text: v})))),
        el("label", {}, "Priority", el("input", {name: "priority", id: "policy-priority",
          type: "number", value: "0"}))),
      el("label", {class: "block"}, "Definition (JSON)",
        el("textarea", {name: "definition", id: "policy-definition", rows: 4,
          placeholder: '{"dead-letter-exchange": "dlx", "message-ttl": 60000}'})),
      el("div", {class: "toolbar"}, el("button", {type: "submit", id: "policy-submit",
        text: "Set policy"})), error, done);
    const listing = table("policies", [
      {title: "Virtual host", value: (p) => p.vhost},
      {title: "Name", value: (p) => p.name},
      {title: "Pattern", value: (p) => p.pattern},
      {title: "Apply to", value: (p) => p["apply-to"]},
      {title: "Priority", value: (p) => p.priority, num: true},
      {title: "Definition", value: (p) => JSON.stringify(p.definition)},
      {title: "", value: () => "", show: (p) => confirming("Clear", async () => {
        try {
          await api("DELETE", `/api/policies/${enc(p.vhost)}/${enc(p.name)}`);
          showError(error, null);
        } catch (exc) { showError(error, exc); }
        update();
      }, {"data-policy": p.name})},
    ], {empty: "No policies."});
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      showError(error, null);
      done.textContent = "";
      const data = new FormData(form);
      let definition;
      try {
        definition = JSON.parse(data.get("definition") || "{}");
      } catch (exc) {
        showError(error, new Error("The definition is not JSON: " + exc.message));
        return;
      }
      try {
        await api("PUT", `/api/policies/${enc(data.get("vhost"))}/${enc(data.get("name"))}`,
          {pattern: data.get("pattern"), definition, "apply-to": data.get("apply-to"),
            priority: Number(data.get("priority") || 0)});
        done.textContent = `Policy ${data.get("name")} set.`;
        update();
      } catch (exc) { showError(error, exc); }
    });
    root.append(el("h1", {text: "Policies"}), listing.node, form);
    const update = async () => {
      const [policies, vhosts] = await Promise.all([api("GET", "/api/policies"),
        api("GET", "/api/vhosts")]);
      listing.set(policies);
      const chosen = vhost.value;
      vhost.replaceChildren(...vhosts.map((v) => el("option", {value: v.name, text: v.name})));
      if (chosen) vhost.value = chosen;
    };
    return update;
  };

  views.admin = (root) => {
    if (!me.tags.includes("administrator")) {
      root.append(el("h1", {text: "Admin"}),
        el("p", {class: "error", text: "Users and virtual hosts are for administrators."}));
      return null;
    }
    const error = errorLine("admin-error");
    const guarded = (action) => async () => {
      try { await action(); showError(error, null); } catch (exc) { showError(error, exc); }
      update();
    };
    const users = table("users", [
      {title: "Name", value: (u) => u.name},
      {title: "Tags", value: (u) => u.tags.join(", ")},
      {title: "", value: () => "", show: (u) => u.name === me.name ? "" :
        confirming("Delete", guarded(() => api("DELETE", `/api/users/${enc(u.name)}`)))},
    ]);
    const vhosts = table("vhosts", [
      {title: "Name", value: (v) => v.name},
      {title: "Messages", value: (v) => v.messages, num: true},
      {title: "", value: () => "", show: (v) =>
        confirming("Delete", guarded(() => api("DELETE", `/api/vhosts/${enc(v.name)}`)))},
    ]);
    const permissions = table("permissions", [
      {title: "User", value: (p) => p.user},
      {title: "Virtual host", value: (p) => p.vhost},
      {title: "Configure", value: (p) => p.configure},
      {title: "Write", value: (p) => p.write},
      {title: "Read", value: (p) => p.read},
    ]);
    const userForm = el("form", {class: "toolbar", id: "user-form"},
      el("input", {name: "name", placeholder: "User name", required: true}),
      el("input", {name: "password", type: "password", placeholder: "Password"}),
      el("input", {name: "tags", placeholder: "Tags (administrator, monitoring, ...)"}),
      el("button", {type: "submit", text: "Add or update user"}));
    userForm.addEventListener("submit", (event) => {
      event.preventDefault();
      const data = new FormData(userForm);
      guarded(() => api("PUT", `/api/users/${enc(data.get("name"))}`,
        {password: data.get("password"), tags: data.get("tags")}))();
    });
    const vhostForm = el("form", {class: "toolbar", id: "vhost-form"},
      el("input", {name: "name", placeholder: "Virtual host", required: true}),
      el("button", {type: "submit", text: "Add virtual host"}));
    vhostForm.addEventListener("submit", (event) => {
      event.preventDefault();
      guarded(() => api("PUT", `/api/vhosts/${enc(new FormData(vhostForm).get("name"))}`, {}))();
    });
    const permissionForm = el("form", {class: "toolbar", id: "permission-form"},
      el("input", {name: "user", placeholder: "User", required: true}),
      el("input", {name: "vhost", placeholder: "Virtual host", required: true}),
      ...["configure", "write", "read"].map((kind) =>
        el("input", {name: kind, placeholder: kind, value: ".*"})),
      el("button", {type: "submit", text: "Set permissions"}));
    permissionForm.addEventListener("submit", (event) => {
      event.preventDefault();
      const data = Object.fromEntries(new FormData(permissionForm));
      guarded(() => api("PUT", `/api/permissions/${enc(data.vhost)}/${enc(data.user)}`,
        {configure: data.configure, write: data.write, read: data.read}))();
    });
    root.append(el("h1", {text: "Users and virtual hosts"}), error,
      el("h2", {text: "Users"}), users.node, userForm,
      el("h2", {text: "Virtual hosts"}), vhosts.node, vhostForm,
      el("h2", {text: "Permissions"}), permissions.node, permissionForm);
    const update = async () => {
      const [u, v, p] = await Promise.all([api("GET", "/api/users"), api("GET", "/api/vhosts"),
        api("GET", "/api/permissions")]);
      users.set(u);
      vhosts.set(v);
      permissions.set(p);
    };
    return update;
  };

  // ---- the dead-letter workbench -------------------------------------------------

  views["dead-letters"] = (root, vhost, queue) => {
    if (queue !== undefined) {
      openWorkbench(root, vhost, queue);
      return null;  // the list is not refreshed under the reader's selection
    }
    const error = errorLine("dead-letters-error");
    const t = table("dead-letter-queues", [
      {title: "Virtual host", value: (q) => q.vhost},
      {title: "Name", value: (q) => q.name, show: (q) => [el("a", {
        href: `#/dead-letters/${enc(q.vhost)}/${enc(q.name)}`, text: q.name}), streamBadge(q)]},
      {title: "Found by", value: (q) => q.why},
      {title: "Ready", value: (q) => q.messages_ready, num: true},
      {title: "Paged out", value: (q) => q.messages_paged_out, num: true},
      {title: "Delayed", value: (q) => q.messages_delayed, num: true},
      {title: "Consumers", value: (q) => q.consumers, num: true},
      {title: "", value: () => "", show: (q) => q.why !== "marked" ? "" :
        el("button", {type: "button", class: "secondary", text: "Unmark",
          onclick: () => mark(q.vhost, q.name, "DELETE")})},
    ], {sortBy: 1, empty: "No queue holds dead letters that you may see."});
    const markForm = el("form", {class: "toolbar", id: "mark-form"},
      el("span", {class: "muted", text: "Another queue holds dead letters:"}),
      el("input", {name: "vhost", placeholder: "Virtual host", value: "/"}),
      el("input", {name: "name", placeholder: "Queue", required: true}),
      el("button", {type: "submit", text: "Mark it"}));
    markForm.addEventListener("submit", (event) => {
      event.preventDefault();
      const data = new FormData(markForm);
      mark(data.get("vhost"), data.get("name"), "PUT");
    });
    async function mark(v, name, method) {
      try {
        await api(method, `/api/queues/${enc(v)}/${enc(name)}/dead-letter-mark`);
        showError(error, null);
      } catch (exc) { showError(error, exc); }
      update();
    }
    root.append(el("h1", {text: "Dead-letter queues"}), error, t.node, markForm);
    const update = async () => t.set(await api("GET", "/api/dead-letter-queues"));
    return update;
  };

  function hexDump(bytes) {
    const lines = [];
    for (let at = 0; at < bytes.length; at += 16) {
      const row = bytes.slice(at, at + 16);
      const hex = [...row].map((b) => b.toString(16).padStart(2, "0")).join(" ");
      const text = [...row].map((b) => (b >= 32 && b < 127 ? String.fromCharCode(b) : ".")).join("");
      lines.push(at.toString(16).padStart(8, "0") + "  " + hex.padEnd(48) + "  " + text);
    }
    return lines.join("\n");
  }

  // Oldest first: where it was published, each death, where it is now.
  function timeline(message, queue) {
    const deaths = [...message.deaths].reverse();
    const items = [];
    if (message.origin) {
      items.push(el("li", {class: "origin"}, el("strong", {text: "Published"}),
        ` to exchange ${message.origin.exchange || "(AMQP default)"} with routing keys `,
        el("code", {text: message.origin.routing_keys.join(", ")}),
        el("span", {class: "muted", text: ` (from ${message.origin.from})`})));
    }
    for (const death of deaths) {
      items.push(el("li", {class: "death"},
        el("strong", {text: death.queue}), " ", el("span", {class: "reason", text: death.reason}),
        death.count > 1 ? ` ×${death.count}` : "", el("br"),
        el("span", {class: "muted", text: `via exchange ${death.exchange || "(AMQP default)"}, keys ` +
          `${death.routing_keys.join(", ")}` + (death.time ? `, first at ${when(death.time)}` : "")}),
        death.original_expiration ? el("div", {class: "muted",
          text: `expiration was ${death.original_expiration} ms`}) : null));
    }
    if (!deaths.length && message.reason) {
      items.push(el("li", {class: "death"}, el("strong", {text: message.original_queue || "?"}),
        " ", el("span", {class: "reason", text: message.reason}),
        message.died_at ? el("span", {class: "muted", text: " first at " + when(message.died_at)}) : ""));
    }
    items.push(el("li", {class: "now"}, "Now in ", el("strong", {text: queue})));
    return el("ol", {class: "timeline", id: "timeline"}, ...items);
  }

  function messageDetail(message, queue, close) {
    const bytes = Uint8Array.from(atob(message.payload_base64), (c) => c.charCodeAt(0));
    const bodyView = el("pre", {id: "body-view"});
    const tabs = el("div", {class: "tabs"});
    const forms = {
      text: () => message.payload_text ?? "(not UTF-8 text: see hex)",
      json: () => {
        try { return JSON.stringify(JSON.parse(message.payload_text), null, 2); }
        catch (_) { return "(not JSON)"; }
      },
      hex: () => hexDump(bytes),
    };
    const show = (name) => {
      bodyView.textContent = forms[name]();
      for (const b of tabs.children) {
        b.classList.toggle("active", b.dataset.form === name);
        b.setAttribute("aria-pressed", String(b.dataset.form === name));
      }
    };
    for (const name of Object.keys(forms)) {
      tabs.append(el("button", {type: "button", class: "secondary", "data-form": name,
        id: "body-" + name, text: name === "json" ? "JSON" : name[0].toUpperCase() + name.slice(1),
        onclick: () => show(name)}));
    }
    const property = (k, v) => (k === "timestamp" && typeof v === "number" ? dateTime(v, true)
      : typeof v === "object" ? JSON.stringify(v) : v);
    const properties = el("table", {id: "properties"},
      ...Object.entries(message.properties).map(([k, v]) =>
        el("tr", {}, el("th", {text: k}), el("td", {text: property(k, v)}))),
      el("tr", {}, el("th", {text: "exchange"}), el("td", {text: message.exchange})),
      el("tr", {}, el("th", {text: "routing key"}), el("td", {text: message.routing_key})));
    const detail = el("div", {id: "message-detail"},
      el("div", {class: "toolbar"},
        el("h2", {text: `Message ${message.properties.message_id ?? "#" + message.seq}`}),
        el("button", {type: "button", class: "secondary", id: "detail-close", text: "Close",
          onclick: close})),
      el("div", {class: "detail-grid"},
        el("div", {}, el("h2", {text: "Death history"}), timeline(message, queue),
          el("h2", {text: "Properties"}), properties),
        el("div", {}, el("h2", {text: "Headers"}),
          el("pre", {id: "headers", text: JSON.stringify(readableHeaders(message.headers), null, 2)}),
          el("h2", {text: `Body (${message.payload_bytes} bytes` +
            (message.payload_truncated ? ", shown in part)" : ")")}), tabs, bodyView)));
    show(message.payload_text !== null && forms.json() !== "(not JSON)" ? "json" : message.payload_text !== null ? "text" : "hex");
    return detail;
  }

  // x-death's `time` is an AMQP timestamp, which the API gives as seconds
  // since the epoch: shown as a date-time.
  function readableHeaders(headers) {
    const copy = JSON.parse(JSON.stringify(headers || {}));
    for (const death of Array.isArray(copy["x-death"]) ? copy["x-death"] : []) {
      if (death && typeof death.time === "number") death.time = dateTime(death.time, true);
    }
    return copy;
  }

  // The filters a dead-letter list takes, the same in a queue's workbench
  // and a stream's (the API reads the same names from both).
  function deadLetterFilterFields() {
    const text = (name, label) => el("label", {}, label, el("input", {name, id: "filter-" + name}));
    return [
      el("label", {}, "Reason", el("select", {name: "reason", id: "filter-reason"},
        el("option", {value: "", text: "any"}), ...REASONS.map((r) => el("option", {value: r, text: r})))),
      text("original_queue", "Original queue"), text("original_exchange", "Original exchange"),
      el("label", {}, "First died since", el("input", {name: "since", id: "filter-since", type: "datetime-local", step: "1"})),
      el("label", {}, "First died until", el("input", {name: "until", id: "filter-until", type: "datetime-local", step: "1"})),
      text("message_id", "Message id"), text("body", "Body contains"),
    ];
  }

  // A filter as the fields above read it, for a question asked before acting
  // on everything it matches: `reason "rejected" and body containing "x"`.
  const FILTER_WORDS = {reason: "reason", original_queue: "original queue",
    original_exchange: "original exchange", since: "first died since", until: "first died until",
    message_id: "message id", body: "body containing"};
  function filterText(filter) {
    return Object.entries(filter).map(([key, value]) => `${FILTER_WORDS[key] ?? key} ` +
      (key === "since" || key === "until" ? dateTime(Number(value), true) : JSON.stringify(value)))
      .join(" and ");
  }

  function workbench(root, vhost, queue) {
    const base = `/api/queues/${enc(vhost)}/${enc(queue)}`;
    let offset = 0;
    let limit = 50;
    let current = {};      // the filter applied
    let shownPage = null;
    const selected = new Set();
    const error = errorLine("workbench-error");
    const counts = el("p", {class: "muted", id: "workbench-counts"});
    const filterForm = el("form", {class: "card", id: "filter-form"},
      el("div", {class: "grid"}, ...deadLetterFilterFields()),
      el("div", {class: "toolbar"},
        el("button", {type: "submit", id: "filter-apply", text: "Apply filter"}),
        el("button", {type: "reset", class: "secondary", id: "filter-reset", text: "Clear"})));
    const listBody = el("tbody");
    const pickAll = el("input", {type: "checkbox", id: "select-page", title: "Select this page",
      onchange: () => {
        for (const m of shownPage.messages) pickAll.checked ? selected.add(m.seq) : selected.delete(m.seq);
        drawList();
      }});
    const listing = el("table", {id: "messages"}, el("thead", {}, el("tr", {},
      el("th", {}, pickAll), ...["Seq", "Message id", "Reason", "Original queue", "Sent to",
        "First died", "Deaths", "Bytes", "Body"].map((title) => el("th", {text: title})))), listBody);
    const pager = el("div", {class: "toolbar"},
      el("button", {type: "button", class: "secondary", id: "page-prev", text: "← Previous",
        onclick: () => { offset = Math.max(0, offset - limit); load(); }}),
      el("button", {type: "button", class: "secondary", id: "page-next", text: "Next →",
        onclick: () => { offset += limit; load(); }}),
      el("select", {id: "page-size", onchange: (e) => { limit = Number(e.target.value); offset = 0; load(); }},
        ...[20, 50, 100, 500].map((n) => el("option", {value: n, text: `${n} a page`, selected: n === limit}))),
      el("span", {class: "muted", id: "page-position"}),
      el("button", {type: "button", class: "secondary", text: "Refresh", onclick: () => load()}));
    let openSeq = null;  // the message shown under its row

    // Actions on the selected messages or all the filtered ones.
    const scope = el("select", {id: "action-scope"},
      el("option", {value: "selected", text: "the selected messages"}),
      el("option", {value: "filtered", text: "all messages matching the filter"}));
    const rate = el("input", {id: "action-rate", class: "short", type: "number", min: "0", placeholder: "1000",
      title: "messages per second; 0: no limit"});
    const moveExchange = el("input", {id: "move-exchange", placeholder: "exchange (\"\" default)"});
    const moveKey = el("input", {id: "move-routing-key", placeholder: "routing key (blank: keep)"});
    const taskView = el("div", {id: "task"});
    // Above the list and sticky: in view however far down the list one reads.
    const actions = el("div", {class: "card", id: "actions"},
      el("div", {class: "toolbar"}, "Act on", scope, "at most", rate, "messages/s",
        el("span", {class: "gap"}),
        el("button", {type: "button", id: "action-redrive", text: "Redrive to origin",
          onclick: () => act("redrive", {})}),
        el("span", {class: "muted", text: "or move to"}), moveExchange, moveKey,
        el("button", {type: "button", id: "action-move", text: "Move",
          onclick: () => act("move", {exchange: moveExchange.value,
            routing_key: moveKey.value === "" ? undefined : moveKey.value})}),
        confirming("Delete", () => act("delete-messages", {}), {id: "action-delete"})),
      taskView);

    // The archive beside the queue: what retention archived, under the same
    // filter, redriven to origin from there.
    const archivePicked = new Set();
    const archiveBody = el("tbody");
    const archiveCounts = el("p", {class: "muted", id: "archive-counts"});
    const archiveResult = el("p", {id: "archive-result"});
    // Records a redrive left out as redriven before: a second redrive of
    // them is a choice, this button, never an accident.
    let archiveLeft = [];
    const archiveAgain = el("button", {type: "button", id: "archive-redrive-again", hidden: true,
      onclick: () => redriveArchived(archiveLeft, true)});
    const archiveTable = el("table", {id: "archived"}, el("thead", {}, el("tr", {},
      ...["", "Message id", "Reason", "Original queue", "Archived", "Redriven", "Bytes", "Body"]
        .map((title) => el("th", {text: title})))), archiveBody);
    const archiveCard = el("div", {class: "card", id: "archive", hidden: true},
      el("h2", {text: "Archived by retention"}), archiveCounts,
      el("div", {class: "toolbar"},
        el("button", {type: "button", id: "archive-redrive", text: "Redrive selected to origin",
          onclick: () => redriveArchived([...archivePicked], false)})),
      archiveResult, archiveAgain, archiveTable);

    root.append(el("p", {}, el("a", {href: "#/dead-letters", text: "Dead-letter queues"}), " / ",
      el("a", {href: queueHref({vhost, name: queue}), id: "workbench-queue",
        text: `queue ${queue}: rates and settings`})),
      el("h1", {id: "workbench-title", text: `${queue} (${vhost})`}), counts, error, filterForm,
      actions, el("div", {class: "card"}, pager,
        el("p", {class: "muted", text: "Choose a message to see its history under it."}), listing),
      archiveCard);

    async function loadArchive() {
      let page;
      try {
        page = await api("GET", `${base}/archive?${new URLSearchParams({...current, limit: 500})}`);
      } catch (_) { archiveCard.hidden = true; return; }  // no archive here
      archiveCard.hidden = page.matched === 0;
      archiveCounts.textContent = `${page.matched} archived matching the filter` +
        (page.matched > page.messages.length ? ` (the first ${page.messages.length} shown)` : "");
      archiveBody.replaceChildren(...page.messages.map((m) => el("tr", {
        "data-event-id": m.event_id, "data-message-id": m.properties.message_id ?? ""},
        el("td", {}, el("input", {type: "checkbox", class: "archive-pick", checked: archivePicked.has(m.event_id),
          onchange: (event) => { event.target.checked ? archivePicked.add(m.event_id) : archivePicked.delete(m.event_id); }})),
        el("td", {}, clip(m.properties.message_id ?? "")),
        el("td", {}, m.reason ? el("span", {class: "reason", text: m.reason}) : ""),
        el("td", {}, clip(m.original_queue ?? "")),
        el("td", {class: "time", text: m.archived_at ? dateTime(Math.floor(m.archived_at / 1e6), true) : ""}),
        el("td", {class: "time", text: m.redriven_at ? dateTime(Math.floor(m.redriven_at), true) : ""}),
        el("td", {class: "num", text: m.payload_bytes}),
        el("td", {}, clip((m.payload_text ?? "(binary)").slice(0, 200), "body")))));
    }

    async function redriveArchived(ids, again) {
      if (!ids.length) { showError(error, new Error("Select archived messages first.")); return; }
      try {
        const result = await api("POST", `${base}/archive/redrive`, {event_ids: ids, again});
        // What the API left out without `again`: neither sent nor kept.
        const done = new Set([...result.event_ids, ...result.kept.map((k) => k.event_id)]);
        archiveLeft = ids.filter((id) => !done.has(id));
        archiveResult.textContent = `${result.redriven} redriven to origin` +
          (result.kept.length ? `, ${result.kept.length} kept (${result.kept.map((k) => k.why).join(", ")})` : "") +
          (archiveLeft.length ? `, ${archiveLeft.length} left: redriven before` : "");
        archiveAgain.textContent = `Redrive ${archiveLeft.length === 1 ? "that one" : `those ${archiveLeft.length}`} again`;
        archiveAgain.hidden = archiveLeft.length === 0;
        archivePicked.clear();
        showError(error, null);
      } catch (exc) { showError(error, exc); }
      loadArchive();
    }

    // The filter is the address's too, so that the page with it is a link
    // (since and until in seconds since the epoch, as the API takes them).
    const here = `#/dead-letters/${enc(vhost)}/${enc(queue)}`;
    const linked = () => history.replaceState(null, "",
      here + (Object.keys(current).length ? "?" + new URLSearchParams(current) : ""));
    for (const field of filterForm.elements) {
      const value = field.name ? routeQuery.get(field.name) : null;
      if (value === null || value === "") continue;
      current[field.name] = value;
      field.value = field.name === "since" || field.name === "until"
        ? dateTime(Number(value)).replace(" ", "T") : value;
    }
    filterForm.addEventListener("submit", (event) => {
      event.preventDefault();
      const data = new FormData(filterForm);
      current = {};
      for (const [key, value] of data.entries()) {
        if (value === "") continue;
        current[key] = key === "since" || key === "until"
          ? String(Math.floor(new Date(value).getTime() / 1000)) : value;
      }
      linked();
      offset = 0;
      selected.clear();
      load();
    });
    filterForm.addEventListener("reset", () => {
      current = {};
      linked();
      offset = 0;
      selected.clear();
      setTimeout(load);
    });

    function drawList() {
      const page = shownPage;
      if (!page.messages.some((m) => m.seq === openSeq)) openSeq = null;
      listBody.replaceChildren(...page.messages.flatMap((m) => {
        const box = el("input", {type: "checkbox", class: "pick", "data-seq": m.seq, checked: selected.has(m.seq),
          onclick: (event) => event.stopPropagation(),
          onchange: (event) => { event.target.checked ? selected.add(m.seq) : selected.delete(m.seq); drawActions(); }});
        const origin = m.origin ? `${m.origin.exchange || "(default)"} → ${m.origin.routing_keys.join(", ")}` : "";
        const body = (m.payload_text ?? "(binary)").slice(0, 200);
        const row = el("tr", {class: "clickable" + (selected.has(m.seq) ? " selected" : "") +
            (m.seq === openSeq ? " open" : ""), "data-seq": m.seq,
          "data-message-id": m.properties.message_id ?? "",
          onclick: () => { openSeq = openSeq === m.seq ? null : m.seq; drawList(); }},
        el("td", {}, box), el("td", {class: "num", text: m.seq}),
        el("td", {}, clip(m.properties.message_id ?? "")),
        el("td", {}, m.reason ? el("span", {class: "reason", text: m.reason}) : ""),
        el("td", {}, clip(m.original_queue ?? "")), el("td", {}, clip(origin)),
        el("td", {class: "time", title: m.died_at ? dateTime(m.died_at, true) : "", text: when(m.died_at)}),
        el("td", {class: "num", text: m.death_count}),
        el("td", {class: "num", text: m.payload_bytes}),
        el("td", {}, clip(body, "body")));
        if (m.seq !== openSeq) return [row];
        return [row, el("tr", {class: "detail-row"}, el("td", {colspan: 10},
          messageDetail(m, queue, () => { openSeq = null; drawList(); })))];
      }));
      pickAll.checked = page.messages.length > 0 && page.messages.every((m) => selected.has(m.seq));
      drawActions();
    }

    function drawActions() {
      scope.options[0].textContent = `the selected messages (${selected.size})`;
      scope.options[1].textContent = `all messages matching the filter (${shownPage ? shownPage.matched : 0})`;
    }

    async function load() {
      const token = viewToken;
      const query = new URLSearchParams({...current, offset, limit});
      try {
        const page = await api("GET", `${base}/messages?${query}`);
        if (token !== viewToken) return;
        shownPage = page;
        showError(error, null);
      } catch (exc) {
        showError(error, exc);
        return;
      }
      const p = shownPage;
      const hidden = [];
      if (p.messages_paged_out) hidden.push(`${p.messages_paged_out} paged out to disk`);
      if (p.messages_delayed) hidden.push(`${p.messages_delayed} waiting out a redelivery delay`);
      counts.textContent = `${p.messages_ready} ready, ${p.matched} matching the filter` +
        (hidden.length ? `; not visible to a peek: ${hidden.join(", ")}` : "");
      const last = Math.min(p.offset + p.messages.length, p.matched);
      $("#page-position", pager).textContent = p.messages.length
        ? `${p.offset + 1}–${last} of ${p.matched}` : `none of ${p.matched}`;
      $("#page-prev", pager).disabled = p.offset === 0;
      $("#page-next", pager).disabled = p.offset + p.limit >= p.matched;
      drawList();
      loadArchive();
    }

    async function act(kind, extra) {
      showError(error, null);
      const body = {...extra};
      if (scope.value === "selected") {
        if (!selected.size) { showError(error, new Error("Select messages first.")); return; }
        body.seqs = [...selected];
      } else {
        body.filter = current;
      }
      if (rate.value !== "") body.rate = Number(rate.value);
      let started;
      try {
        started = await api("POST", `${base}/${kind}`, body);
      } catch (exc) { showError(error, exc); return; }
      selected.clear();
      follow(started.task);
    }

    async function follow(id) {
      const token = viewToken;
      const bar = el("div");  // its width is set through CSSOM: the CSP forbids inline styles
      const line = el("p", {id: "task-status"});
      const stop = el("button", {type: "button", class: "secondary", id: "task-stop", text: "Stop",
        onclick: () => api("DELETE", `/api/tasks/${enc(id)}`).catch((exc) => showError(error, exc))});
      taskView.replaceChildren(el("div", {class: "progress"}, bar), line, stop);
      for (;;) {
        let task;
        try { task = await api("GET", `/api/tasks/${enc(id)}`); } catch (exc) { showError(error, exc); return; }
        if (token !== viewToken) return;
        bar.style.width = (task.total ? (100 * task.done) / task.total : 100) + "%";
        const failures = Object.entries(task.failures).map(([why, n]) => `${n} ${why}`).join(", ");
        line.textContent = `${task.kind} ${task.state}: ${task.done} of ${task.total} done; ` +
          `${task.moved} ${task.kind === "delete" ? "deleted" : "moved"}, ${task.failed} failed` +
          (failures ? ` (${failures})` : "") + `, ${task.not_found} no longer there, ` +
          `${task.duplicates} duplicates` + (task.error ? `. ${task.error}` : "");
        line.dataset.state = task.state;
        if (task.state !== "running") break;
        await new Promise((resolve) => setTimeout(resolve, TASK_POLL_MS));
      }
      stop.remove();
      load();
    }

    load();
    return null;  // the list is not refreshed under the reader's selection; Refresh does it
  }

  // The workbench of a queue or of a stream: which, its type says.
  async function openWorkbench(root, vhost, queue) {
    const token = viewToken;
    let type = null;
    try {
      type = (await api("GET", `/api/queues/${enc(vhost)}/${enc(queue)}`)).type;
    } catch (_) { /* the workbench's own request says what is wrong */ }
    if (token !== viewToken) return;
    (type === "stream" ? streamWorkbench : workbench)(root, vhost, queue);
  }

  // A stream's workbench: a page of its log from an offset or a moment,
  // filtered as the API filters, paged forward by the offset the API says
  // the next page starts at.  Nothing is consumed.  A redrive copies the
  // selected messages back to where they died from; the stream keeps them,
  // marked as redriven, and redriving one again takes a second, deliberate
  // click (the API's `again`).  "Redrive all matching" does the same for
  // every message the applied filter takes from the page's start on, asked
  // about first; those it leaves as redriven before get a button of their own.
  function streamWorkbench(root, vhost, queue) {
    const base = `/api/queues/${enc(vhost)}/${enc(queue)}`;
    let start = {offset: 0};  // where the shown page starts: {offset} or {timestamp}
    let earlier = [];          // the starts of the pages before it (← Previous)
    let limit = 50;
    let current = {};          // the filter applied
    let shownPage = null;
    let openSeq = null;        // the message shown under its row
    const selected = new Map();  // offset -> redriven already?
    const error = errorLine("workbench-error");
    const counts = el("p", {class: "muted", id: "workbench-counts"});
    const form = el("form", {class: "card", id: "stream-form"},
      el("div", {class: "grid"},
        el("label", {}, "Start at offset", el("input", {name: "offset", id: "stream-offset",
          type: "number", min: "0", placeholder: "the first"})),
        el("label", {}, "or at the time", el("input", {name: "timestamp", id: "stream-time",
          type: "datetime-local", step: "1"})),
        ...deadLetterFilterFields()),
      el("div", {class: "toolbar"},
        el("button", {type: "submit", id: "stream-go", text: "Show"}),
        el("button", {type: "reset", class: "secondary", id: "filter-reset", text: "Clear"})));
    const listBody = el("tbody");
    const pickAll = el("input", {type: "checkbox", id: "select-page", title: "Select this page",
      onchange: () => {
        for (const m of shownPage.messages) {
          if (pickAll.checked) selected.set(m.seq, m.redriven); else selected.delete(m.seq);
        }
        drawList();
      }});
    const listing = el("table", {id: "stream-messages"}, el("thead", {}, el("tr", {},
      el("th", {}, pickAll), ...["Offset", "Message id", "Reason", "Original queue", "First died",
        "Deaths", "In the stream since", "Redriven", "Bytes", "Body"].map((title) => el("th", {text: title})))),
    listBody);
    const position = el("span", {class: "muted", id: "page-position"});
    const prev = el("button", {type: "button", class: "secondary", id: "page-prev", text: "← Previous",
      onclick: () => { start = earlier.pop() || {offset: 0}; load(); }});
    const next = el("button", {type: "button", class: "secondary", id: "page-next", text: "Next →",
      onclick: () => { earlier.push(start); start = {offset: shownPage.next_offset}; load(); }});
    const pager = el("div", {class: "toolbar"}, prev, next,
      el("select", {id: "page-size", onchange: (e) => { limit = Number(e.target.value); load(); }},
        ...[20, 50, 100, 500].map((n) => el("option", {value: n, text: `${n} a page`, selected: n === limit}))),
      position, el("button", {type: "button", class: "secondary", id: "page-refresh", text: "Refresh",
        onclick: () => load()}));

    const picked = el("span", {class: "muted", id: "stream-picked"});
    const result = el("p", {id: "stream-redrive-result"});
    const confirmText = el("span", {id: "stream-confirm-text"});
    const confirmBox = el("div", {class: "toolbar confirm", id: "stream-confirm", hidden: true},
      confirmText,
      el("button", {type: "button", class: "danger", id: "stream-redrive-again",
        text: "Redrive again", onclick: () => redrive(true)}),
      el("button", {type: "button", class: "secondary", id: "stream-redrive-others",
        text: "Only the others", onclick: () => redrive(false)}),
      el("button", {type: "button", class: "secondary", id: "stream-redrive-cancel", text: "Cancel",
        onclick: () => { confirmBox.hidden = true; }}));
    let allAsked = null;  // {filter, offset}: what the question about all matching stated
    let leftBefore = [];  // the offsets a redrive of all matching left: redriven before
    const allText = el("span", {id: "stream-all-confirm-text"});
    const allBox = el("div", {class: "toolbar confirm", id: "stream-all-confirm", hidden: true},
      allText,
      el("button", {type: "button", class: "danger", id: "stream-redrive-all-yes",
        text: "Redrive all matching", onclick: () => redriveAll()}),
      el("button", {type: "button", class: "secondary", id: "stream-redrive-all-cancel",
        text: "Cancel", onclick: () => { allBox.hidden = true; }}));
    const leftAgain = el("button", {type: "button", class: "danger", id: "stream-redrive-left-again",
      hidden: true, onclick: () => redriveLeftAgain()});
    const actions = el("div", {class: "card", id: "actions"},
      el("div", {class: "toolbar"},
        el("button", {type: "button", id: "stream-redrive", text: "Redrive selected to origin",
          onclick: () => redrive(null)}),
        el("button", {type: "button", id: "stream-redrive-all", text: "Redrive all matching to origin",
          onclick: () => askAll()}),
        picked, el("span", {class: "muted",
          text: "Copies go back to the queue each first died in; the stream keeps them."})),
      confirmBox, allBox, el("div", {class: "toolbar"}, result, leftAgain));

    root.append(el("p", {}, el("a", {href: "#/dead-letters", text: "Dead-letter queues"}), " / ",
      el("a", {href: queueHref({vhost, name: queue}), id: "workbench-queue",
        text: `stream ${queue}: its log and consumers`})),
      el("h1", {id: "workbench-title"}, `${queue} (${vhost}) `,
        el("span", {class: "badge stream-badge", text: "stream"})),
      counts, error, form, actions, el("div", {class: "card"}, pager,
        el("p", {class: "muted", text: "Choose a message to see its history under it."}), listing));

    const seconds = (value) => String(Math.floor(new Date(value).getTime() / 1000));
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const data = new FormData(form);
      current = {};
      for (const [key, value] of data.entries()) {
        if (value === "" || key === "offset" || key === "timestamp") continue;
        current[key] = key === "since" || key === "until" ? seconds(value) : value;
      }
      const at = data.get("timestamp");
      start = at ? {timestamp: seconds(at)} : {offset: Number(data.get("offset") || 0)};
      earlier = [];
      load();
    });
    form.addEventListener("reset", () => {
      current = {};
      start = {offset: 0};
      earlier = [];
      setTimeout(load);
    });

    function drawPicked() {
      const before = [...selected.values()].filter(Boolean).length;
      picked.textContent = `${selected.size} selected` +
        (before ? `, ${before} of them redriven before` : "");
    }

    function drawList() {
      const page = shownPage;
      if (!page.messages.some((m) => m.seq === openSeq)) openSeq = null;
      listBody.replaceChildren(...page.messages.flatMap((m) => {
        const box = el("input", {type: "checkbox", class: "pick", "data-offset": m.seq,
          checked: selected.has(m.seq), onclick: (event) => event.stopPropagation(),
          onchange: (event) => {
            if (event.target.checked) selected.set(m.seq, m.redriven); else selected.delete(m.seq);
            drawPicked();
          }});
        const row = el("tr", {class: "clickable" + (m.redriven ? " redriven" : "") +
            (m.seq === openSeq ? " open" : ""), "data-offset": m.seq,
          "data-message-id": m.properties.message_id ?? "", "data-redriven": String(m.redriven),
          onclick: () => { openSeq = openSeq === m.seq ? null : m.seq; drawList(); }},
        el("td", {}, box), el("td", {class: "num", text: m.seq}),
        el("td", {}, clip(m.properties.message_id ?? "")),
        el("td", {}, m.reason ? el("span", {class: "reason", text: m.reason}) : ""),
        el("td", {}, clip(m.original_queue ?? "")),
        el("td", {class: "time", title: m.died_at ? dateTime(m.died_at, true) : "", text: when(m.died_at)}),
        el("td", {class: "num", text: m.death_count}),
        el("td", {class: "time", text: when(Math.floor(m.appended_at))}),
        el("td", {}, m.redriven ? el("span", {class: "badge redriven-badge", text: "redriven"}) : ""),
        el("td", {class: "num", text: m.payload_bytes}),
        el("td", {}, clip((m.payload_text ?? "(binary)").slice(0, 200), "body")));
        if (m.seq !== openSeq) return [row];
        return [row, el("tr", {class: "detail-row"}, el("td", {colspan: 11},
          messageDetail(m, queue, () => { openSeq = null; drawList(); })))];
      }));
      pickAll.checked = page.messages.length > 0 && page.messages.every((m) => selected.has(m.seq));
      drawPicked();
    }

    async function load() {
      const token = viewToken;
      const query = new URLSearchParams({...current, ...start, limit});
      let page;
      try {
        page = await api("GET", `${base}/messages?${query}`);
      } catch (exc) {
        showError(error, exc);
        return;
      }
      if (token !== viewToken) return;
      showError(error, null);
      shownPage = page;
      // What is known again of a selected message: whether it was redriven.
      for (const m of page.messages) if (selected.has(m.seq)) selected.set(m.seq, m.redriven);
      const last = page.committed_offset;
      counts.textContent = `${page.messages_ready} messages in the stream, offsets ` +
        (last >= page.first_offset ? `${page.first_offset}–${last}` : "none yet") +
        `; ${page.matched} shown of ${page.scanned} read`;
      position.textContent = page.messages.length
        ? `offsets ${page.messages[0].seq}–${page.messages[page.messages.length - 1].seq}`
        : "no messages here";
      prev.disabled = earlier.length === 0;
      next.disabled = page.next_offset > last;
      drawList();
    }

    // What a redrive did, in the result line.  A redrive by filter says
    // too where the scan limit stopped its read, if the stream goes on.
    function tell(done) {
      const parts = [`${done.redriven.length} redriven to origin`];
      if (done.already_redriven.length) parts.push(`${done.already_redriven.length} left: redriven before`);
      if (done.kept.length) parts.push(`${done.kept.length} not sent (${done.kept.map((k) => k.why).join(", ")})`);
      if (done.missing.length) parts.push(`${done.missing.length} no longer in the stream`);
      if (done.duplicates) parts.push(`${done.duplicates} duplicates`);
      if (done.more) {
        parts.push(`the read stopped at the scan limit, before offset ${done.next_offset}: ` +
          `start there for the rest`);
      }
      result.textContent = parts.join("; ") + ".";
      result.dataset.redriven = done.redriven.join(",");
    }

    function quiet() {
      result.textContent = "";
      confirmBox.hidden = true;
      allBox.hidden = true;
      leftAgain.hidden = true;
      leftBefore = [];
    }

    // Where "all matching" starts: the offset asked for, or, for a page
    // started at a moment, its first match (none before it matches), or
    // where its read ended when it showed none.
    function startOffset() {
      if ("offset" in start) return start.offset;
      return shownPage.messages.length ? shownPage.messages[0].seq : shownPage.next_offset;
    }

    function askAll() {
      quiet();
      if (!shownPage) return;
      allAsked = {filter: {...current}, offset: startOffset()};
      const what = filterText(allAsked.filter);
      allText.textContent = `Redrive all messages ${what ? `matching ${what} ` : ""}` +
        `from offset ${allAsked.offset} on${what ? "" : " (no filter)"} to their origin? ` +
        `Those redriven before are left out.`;
      allBox.hidden = false;
    }

    async function redriveAll() {
      allBox.hidden = true;
      let done;
      try {
        done = await api("POST", `${base}/redrive`, {...allAsked, again: false});
      } catch (exc) { showError(error, exc); return; }
      showError(error, null);
      tell(done);
      leftBefore = done.already_redriven;
      if (leftBefore.length) {
        leftAgain.textContent = `Redrive ${leftBefore.length === 1 ? "that one" : `those ${leftBefore.length}`} again`;
        leftAgain.hidden = false;
      }
      load();
    }

    async function redriveLeftAgain() {
      const offsets = leftBefore;
      quiet();
      let done;
      try {
        done = await api("POST", `${base}/redrive`, {offsets, again: true});
      } catch (exc) { showError(error, exc); return; }
      showError(error, null);
      tell(done);
      load();
    }

    // `again`: null when asked from the button (the selection decides
    // whether to ask first), true or false once the user chose.
    async function redrive(again) {
      quiet();
      if (!selected.size) { showError(error, new Error("Select messages first.")); return; }
      const before = [...selected.entries()].filter(([, redriven]) => redriven).map(([o]) => o);
      if (again === null && before.length) {
        const one = before.length === 1;
        confirmText.textContent = `${before.length} of the ${selected.size} selected ` +
          `${one ? "was" : "were"} redriven before (offset${one ? "" : "s"} ` +
          `${before.sort((a, b) => a - b).join(", ")}). Redrive ${one ? "it" : "them"} again?`;
        confirmBox.hidden = false;
        return;
      }
      confirmBox.hidden = true;
      let done;
      try {
        done = await api("POST", `${base}/redrive`,
          {offsets: [...selected.keys()].sort((a, b) => a - b), again: again === true});
      } catch (exc) { showError(error, exc); return; }
      showError(error, null);
      tell(done);
      selected.clear();
      load();
    }

    load();
  }

  // ---- login, navigation ----------------------------------------------------------

  function leaveView() {
    for (const done of leaving) done();
    leaving = [];
  }

  function logout() {
    auth = null;
    me = null;
    sessionStorage.removeItem(STORED);
    clearInterval(poller);
    viewToken++;
    leaveView();
    $("#nav").hidden = true;
    $("#logout").hidden = true;
    $("#who").textContent = "";
    $("#view").hidden = true;
    $("#view").replaceChildren();
    $("#login").hidden = false;
  }

  // `who`: the login's own answer, so a fresh login asks the broker once.
  async function start(who) {
    try {
      me = who || await api("GET", "/api/whoami");
    } catch (exc) {
      logout();
      return;
    }
    $("#login").hidden = true;
    $("#nav").hidden = false;
    $("#logout").hidden = false;
    $("#nav-admin").hidden = !me.tags.includes("administrator");
    $("#who").textContent = `${me.name} (${me.tags.join(", ") || "no tags"})`;
    $("#view").hidden = false;
    route();
  }

  function route() {
    if (!me) return;
    const [path, query] = location.hash.replace(/^#\/?/, "").split("?", 2);
    routeQuery = new URLSearchParams(query || "");
    const parts = (path || "overview").split("/").map(decodeURIComponent);
    const name = views[parts[0]] ? parts[0] : "overview";
    for (const link of document.querySelectorAll("#nav a")) {
      link.classList.toggle("active", link.dataset.view === name);
    }
    clearInterval(poller);
    const token = ++viewToken;
    leaveView();
    const root = $("#view");
    root.replaceChildren();
    const viewError = errorLine("view-error");
    root.append(viewError);
    const update = views[name](root, ...parts.slice(1));
    if (!update) return;
    const tick = async () => {
      try {
        await update();
        if (token === viewToken) showError(viewError, null);
      } catch (exc) {
        if (token === viewToken) showError(viewError, exc);
      }
    };
    tick();
    poller = setInterval(tick, POLL_MS);
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("#login").addEventListener("submit", async (event) => {
      event.preventDefault();
      const candidate = basic($("#login-username").value, $("#login-password").value);
      let who;
      try {
        who = await api("GET", "/api/whoami", undefined, candidate);
      } catch (exc) {
        $("#login-error").textContent = exc.status === 401 && exc.message !== "Not_Authorized"
          ? exc.message : "Login failed: wrong user name or password.";
        return;
      }
      $("#login-error").textContent = "";
      auth = candidate;
      sessionStorage.setItem(STORED, auth);
      start(who);
    });
    $("#logout").addEventListener("click", logout);
    window.addEventListener("hashchange", route);
    if (auth) start(); else logout();
  });
})();
