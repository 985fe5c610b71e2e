// The web console: a page per hash (#/queues, #/dead-letters/vhost/name ...),
// everything read from and done through the management HTTP API with the
// logged-in user's credentials.  Plain DOM, no library, no build step.
"use strict";
(() => {
  const POLL_MS = 5000;
  const TASK_POLL_MS = 500;
  const REASONS = ["rejected", "expired", "maxlen", "delivery_limit"];
  const STORED = "amqp-console-auth";
  let auth = sessionStorage.getItem(STORED);
  let me = null;
  let poller = null;
  let viewToken = 0;  // a view's late answers are dropped once another view is shown

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
  const when = (seconds) => (seconds ? new Date(seconds * 1000).toLocaleString() : "");
  const rateText = (perSecond) => (perSecond === undefined ? "" : perSecond.toFixed(1) + "/s");

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

  // Per-second rates from two readings of counters, kept per key.
  const readings = new Map();
  function rates(key, counters) {
    const now = performance.now();
    const last = readings.get(key);
    readings.set(key, {at: now, counters});
    if (!last || now <= last.at) return {};
    const seconds = (now - last.at) / 1000;
    const out = {};
    for (const [name, value] of Object.entries(counters)) {
      if (name in last.counters) out[name] = Math.max(0, value - last.counters[name]) / seconds;
    }
    return out;
  }

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

  function errorLine(id) { return el("p", {class: "error", id, role: "alert"}); }
  function showError(node, error) { node.textContent = error ? error.message || String(error) : ""; }

  // ---- views ---------------------------------------------------------------------

  const views = {};

  views.overview = (root) => {
    const tiles = el("div", {class: "tiles", id: "overview-tiles"});
    const rateTiles = el("div", {class: "tiles", id: "overview-rates"});
    const deadTiles = el("div", {class: "tiles", id: "overview-dead-letters"});
    const alarms = el("div", {id: "overview-alarms"});
    const listeners = el("div", {id: "overview-listeners"});
    root.append(el("h1", {text: "Overview"}), alarms, el("h2", {text: "Totals"}), tiles,
      el("h2", {text: "Message rates"}), rateTiles,
      el("h2", {text: "Dead letters per minute, by reason"}), deadTiles, listeners);
    const tile = (label, value, id) => el("div", {class: "tile", id},
      el("div", {class: "n", text: value}), el("div", {class: "l", text: label}));
    return async () => {
      const o = await api("GET", "/api/overview");
      const t = o.object_totals, q = o.queue_totals;
      tiles.replaceChildren(tile("Connections", t.connections), tile("Channels", t.channels),
        tile("Exchanges", t.exchanges), tile("Queues", t.queues, "total-queues"),
        tile("Consumers", t.consumers), tile("Ready", q.messages_ready, "total-ready"),
        tile("Unacked", q.messages_unacknowledged), tile("Messages", q.messages));
      const r = rates("overview", o.message_stats);
      rateTiles.replaceChildren(tile("Publish", rateText(r.publish)),
        tile("Deliver / get", rateText(r.deliver_get)), tile("Ack", rateText(r.ack)));
      const dead = rates("overview-dead", o.dead_lettered || {});
      deadTiles.replaceChildren(...Object.entries(o.dead_lettered || {}).map(([reason, total]) =>
        tile(`${reason} (${total} in all)`,
          dead[reason] === undefined ? "" : (dead[reason] * 60).toFixed(1), "dead-" + reason)));
      alarms.replaceChildren(...(o.alarms && o.alarms.length
        ? o.alarms.map((a) => el("span", {class: "alarm", text: `${a} alarm: publishers are blocked`}))
        : [el("span", {class: "ok", text: "No resource alarms."})]));
      listeners.replaceChildren(...(o.listeners ? [el("h2", {text: "Listeners"}),
        el("table", {}, el("tr", {}, el("th", {text: "Protocol"}), el("th", {text: "Port"})),
          ...o.listeners.map((l) => el("tr", {}, el("td", {text: l.protocol}),
            el("td", {text: l.port}))))] : []));
    };
  };

  views.queues = (root) => {
    const queueRates = new Map();
    const dead = (q) => Object.values(q.dead_lettered || {}).reduce((a, b) => a + b, 0);
    const t = table("queues", [
      {title: "Virtual host", value: (q) => q.vhost},
      {title: "Name", value: (q) => q.name,
        show: (q) => el("a", {href: `#/dead-letters/${enc(q.vhost)}/${enc(q.name)}`,
          title: "Browse its messages in the workbench", text: q.name})},
      {title: "Type", value: (q) => q.type},
      {title: "Policy", value: (q) => q.policy || ""},
      {title: "Arguments", value: (q) => compact(q.arguments)},
      {title: "Consumers", value: (q) => q.consumers, num: true},
      {title: "Ready", value: (q) => q.messages_ready, num: true},
      {title: "Unacked", value: (q) => q.messages_unacknowledged, num: true},
      {title: "Total", value: (q) => q.messages, num: true},
      {title: "Publish", value: (q) => queueRates.get(q.vhost + "\0" + q.name)?.publish ?? -1,
        show: (q) => rateText(queueRates.get(q.vhost + "\0" + q.name)?.publish), num: true},
      {title: "Deliver", value: (q) => queueRates.get(q.vhost + "\0" + q.name)?.deliver_get ?? -1,
        show: (q) => rateText(queueRates.get(q.vhost + "\0" + q.name)?.deliver_get), num: true},
      {title: "Dead-lettered", value: dead, num: true},
    ], {sortBy: 1, empty: "No queues you may see."});
    root.append(el("h1", {text: "Queues"}), t.node);
    return async () => {
      const queues = await api("GET", "/api/queues");
      for (const q of queues) {
        const key = q.vhost + "\0" + q.name;
        queueRates.set(key, rates("queue:" + key, q.message_stats));
      }
      t.set(queues);
    };
  };

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
    if (queue !== undefined) return workbench(root, vhost, queue);
    const error = errorLine("dead-letters-error");
    const t = table("dead-letter-queues", [
      {title: "Virtual host", value: (q) => q.vhost},
      {title: "Name", value: (q) => q.name, show: (q) => el("a", {
        href: `#/dead-letters/${enc(q.vhost)}/${enc(q.name)}`, text: q.name})},
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

  function messageDetail(message, queue) {
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
      [...tabs.children].forEach((b) => b.classList.toggle("active", b.dataset.form === name));
    };
    for (const name of Object.keys(forms)) {
      tabs.append(el("button", {type: "button", class: "secondary", "data-form": name,
        id: "body-" + name, text: name === "json" ? "JSON" : name[0].toUpperCase() + name.slice(1),
        onclick: () => show(name)}));
    }
    const properties = el("table", {id: "properties"},
      ...Object.entries(message.properties).map(([k, v]) =>
        el("tr", {}, el("th", {text: k}), el("td", {text: typeof v === "object" ? JSON.stringify(v) : v}))),
      el("tr", {}, el("th", {text: "exchange"}), el("td", {text: message.exchange})),
      el("tr", {}, el("th", {text: "routing key"}), el("td", {text: message.routing_key})));
    const detail = el("div", {class: "card", id: "message-detail"},
      el("h2", {text: `Message ${message.properties.message_id ?? "#" + message.seq}`}),
      el("h2", {text: "Death history"}), timeline(message, queue),
      el("h2", {text: "Properties"}), properties,
      el("h2", {text: "Headers"}), el("pre", {id: "headers", text: JSON.stringify(message.headers, null, 2)}),
      el("h2", {text: `Body (${message.payload_bytes} bytes` +
        (message.payload_truncated ? ", shown in part)" : ")")}), tabs, bodyView);
    show(message.payload_text !== null && forms.json() !== "(not JSON)" ? "json" : message.payload_text !== null ? "text" : "hex");
    return detail;
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
    const text = (name, label) => el("label", {}, label, el("input", {name, id: "filter-" + name}));
    const filterForm = el("form", {class: "card", id: "filter-form"},
      el("div", {class: "grid"},
        el("label", {}, "Reason", el("select", {name: "reason", id: "filter-reason"},
          el("option", {value: "", text: "any"}), ...REASONS.map((r) => el("option", {value: r, text: r})))),
        text("original_queue", "Original queue"), text("original_exchange", "Original exchange"),
        el("label", {}, "First died since", el("input", {name: "since", id: "filter-since", type: "datetime-local"})),
        el("label", {}, "First died until", el("input", {name: "until", id: "filter-until", type: "datetime-local"})),
        text("message_id", "Message id"), text("body", "Body contains")),
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
    const detail = el("div", {id: "detail"}, el("p", {class: "muted", text: "Choose a message to see its history."}));

    // Actions on the selected messages or all the filtered ones.
    const scope = el("select", {id: "action-scope"},
      el("option", {value: "selected", text: "the selected messages"}),
      el("option", {value: "filtered", text: "all messages matching the filter"}));
    const rate = el("input", {id: "action-rate", type: "number", min: "0", placeholder: "1000",
      title: "messages per second; 0: no limit"});
    const moveExchange = el("input", {id: "move-exchange", placeholder: "exchange (\"\" default)"});
    const moveKey = el("input", {id: "move-routing-key", placeholder: "routing key (blank: keep)"});
    const taskView = el("div", {id: "task"});
    const actions = el("div", {class: "card", id: "actions"},
      el("div", {class: "toolbar"}, "Act on", scope, "at most", rate, "messages/s"),
      el("div", {class: "toolbar"},
        el("button", {type: "button", id: "action-redrive", text: "Redrive to origin",
          onclick: () => act("redrive", {})}),
        el("span", {class: "muted", text: "or move to"}), moveExchange, moveKey,
        el("button", {type: "button", id: "action-move", text: "Move",
          onclick: () => act("move", {exchange: moveExchange.value,
            routing_key: moveKey.value === "" ? undefined : moveKey.value})}),
        confirming("Delete", () => act("delete-messages", {}), {id: "action-delete"})),
      taskView);

    root.append(el("p", {}, el("a", {href: "#/dead-letters", text: "Dead-letter queues"}), " / "),
      el("h1", {id: "workbench-title", text: `${queue} (${vhost})`}), counts, error, filterForm,
      el("div", {class: "split"}, el("div", {}, el("div", {class: "card"}, pager, listing), actions), detail));

    filterForm.addEventListener("submit", (event) => {
      event.preventDefault();
      const data = new FormData(filterForm);
      current = {};
      for (const [key, value] of data.entries()) {
        if (value === "") continue;
        current[key] = key === "since" || key === "until"
          ? String(Math.floor(new Date(value).getTime() / 1000)) : value;
      }
      offset = 0;
      selected.clear();
      load();
    });
    filterForm.addEventListener("reset", () => {
      current = {};
      offset = 0;
      selected.clear();
      setTimeout(load);
    });

    function drawList() {
      const page = shownPage;
      listBody.replaceChildren(...page.messages.map((m) => {
        const box = el("input", {type: "checkbox", class: "pick", "data-seq": m.seq, checked: selected.has(m.seq),
          onclick: (event) => event.stopPropagation(),
          onchange: (event) => { event.target.checked ? selected.add(m.seq) : selected.delete(m.seq); drawActions(); }});
        const origin = m.origin ? `${m.origin.exchange || "(default)"} → ${m.origin.routing_keys.join(", ")}` : "";
        return el("tr", {class: "clickable" + (selected.has(m.seq) ? " selected" : ""), "data-seq": m.seq,
          "data-message-id": m.properties.message_id ?? "",
          onclick: () => detail.replaceChildren(messageDetail(m, queue))},
        el("td", {}, box), el("td", {class: "num", text: m.seq}),
        el("td", {text: m.properties.message_id ?? ""}),
        el("td", {}, m.reason ? el("span", {class: "reason", text: m.reason}) : ""),
        el("td", {text: m.original_queue ?? ""}), el("td", {text: origin}),
        el("td", {text: when(m.died_at)}), el("td", {class: "num", text: m.death_count}),
        el("td", {class: "num", text: m.payload_bytes}),
        el("td", {text: (m.payload_text ?? "(binary)").slice(0, 60)}));
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

  // ---- login, navigation ----------------------------------------------------------

  function logout() {
    auth = null;
    me = null;
    sessionStorage.removeItem(STORED);
    clearInterval(poller);
    viewToken++;
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
    const parts = (location.hash.replace(/^#\/?/, "") || "overview").split("/").map(decodeURIComponent);
    const name = views[parts[0]] ? parts[0] : "overview";
    for (const link of document.querySelectorAll("#nav a")) {
      link.classList.toggle("active", link.dataset.view === name);
    }
    clearInterval(poller);
    const token = ++viewToken;
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
