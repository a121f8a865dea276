// The anefit HTML report: stacks the chunks the generator laid out, toggles
// repeated groups, zooms and pans, shows an op's details and findings, and
// filters the findings table. All data come from the JSON blocks of the page
// ("anefit.check/2", the graph, "anefit.split/1"); nothing is fetched.
(function () {
  'use strict';
  var t0 = performance.now();
  // The SVG namespace, read from the page's own SVG.
  var SVGNS = document.querySelector('svg.canvas').namespaceURI;
  function $(s, r) { return (r || document).querySelector(s); }
  function $$(s, r) { return Array.prototype.slice.call((r || document).querySelectorAll(s)); }
  function json(id) { var e = document.getElementById(id); return e ? JSON.parse(e.textContent) : null; }
  function h(s) {
    return String(s == null ? '' : s).replace(/[&<>"']/g, function (c) {
      return { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c];
    });
  }
  function cls(s) { return String(s).toLowerCase().replace(/[^a-z0-9-]/g, '-'); }
  function el(tag, attrs, parent) {
    var e = document.createElementNS(SVGNS, tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function fmtFlops(f) {
    var u = ['', 'K', 'M', 'G', 'T', 'P'], i = 0;
    while (f >= 1000 && i < 5) { f /= 1000; i++; }
    return (i ? f.toFixed(2) : String(Math.round(f))) + ' ' + u[i] + 'FLOP';
  }

  var check = json('anefit-check'), graph = json('anefit-graph'), split = json('anefit-split');
  var palette = graph.palette, rules = graph.rules;
  var svg = $('svg.canvas'), viewport = $('.viewport', svg), panel = $('aside.panel');
  var EFFECT_ORDER = ['runtime-fail', 'compile-fail', 'at-risk', 'wrong-numerics', 'fallback', 'slow'];
  /// How severe a finding is: its level (anefit.check/2: the effect, or
  /// at-risk when contested), else its effect.
  function sev(fd) { return fd.level || fd.effect; }
  /// A finding's module with layer indices made one ("layers.3.conv" ->
  /// "layers.*.conv", as report/Sources.h moduleGroup); '' without a source.
  function moduleGroup(fd) {
    var m = fd.source && fd.source.module;
    return m ? m.split('.').map(function (p) { return /^[0-9]+$/.test(p) ? '*' : p; }).join('.') : '';
  }
  function effectRank(e) { var i = EFFECT_ORDER.indexOf(e); return i < 0 ? EFFECT_ORDER.length : i; }
  function label(kind, name) { var p = palette[kind][name]; return p ? p.label : name; }
  function meaning(kind, name) { var p = palette[kind][name]; return p ? p.meaning : ''; }
  function chip(kind, name) {
    var pre = kind === 'verdict' ? 'v-' : kind === 'effect' ? 'e-' : 'p-';
    return '<span class="chip ' + pre + cls(name) + '">' + h(label(kind, name)) + '</span>';
  }

  // --- Per-function state --------------------------------------------------
  var fns = graph.functions.map(function (f, fi) {
    var root = $('g.fn[data-f="' + fi + '"]', svg);
    var F = { f: f, fi: fi, root: root, chunkEls: [], boxEls: [], opEls: [], byName: new Map(),
              findings: f.ops.map(function () { return []; }), wide: [], firstOp: [],
              view: null, plan: null };
    $$(':scope > g.chunk', root).forEach(function (g) { F.chunkEls[+g.getAttribute('data-c')] = g; });
    $$(':scope > g.gbox', root).forEach(function (g) { F.boxEls[+g.getAttribute('data-g')] = g; });
    $$('g.op', root).forEach(function (g) { F.opEls[+g.getAttribute('data-i')] = g; });
    f.ops.forEach(function (o, i) {
      F.byName.set(o.n, i);
      if (F.firstOp[o.c] === undefined) F.firstOp[o.c] = i;
    });
    Object.keys(f.nested).forEach(function (k) { F.byName.set(k, f.nested[k]); });
    F.under = el('g', { 'class': 'under' });
    root.insertBefore(F.under, root.firstChild);
    return F;
  });
  var byFnName = new Map(fns.map(function (F) { return [F.f.name, F]; }));
  check.findings.forEach(function (fd, k) {
    var F = byFnName.get(fd.function);
    if (!F) return;
    var i = fd.op != null ? F.byName.get(fd.op) : undefined;
    if (i === undefined) F.wide.push(k); else F.findings[i].push(k);
  });
  fns.forEach(function (F) {
    F.wideRules = new Set(F.wide.map(function (k) { return check.findings[k].rule; }));
  });
  if (split) split.functions.forEach(function (fp) {
    var F = byFnName.get(fp.function);
    if (F) F.plan = fp;
  });

  // --- Stacking chunks and groups ------------------------------------------
  var GAP = 18, HEAD = 26, PAD = 14;
  function layout(F) {
    var f = F.f, y = 0, items = [], frames = [], c = 0;
    F.chunkAt = []; F.boxAt = [];
    while (c < f.chunks.length) {
      var ch = f.chunks[c], g = ch.g != null ? f.groups[ch.g] : null;
      // Items joined by a link sit closer: the link is the gap.
      var linked = items.length && items[items.length - 1].hasOut;
      if (g && g.collapsed) {
        y += linked ? GAP : 0;
        F.boxAt[ch.g] = { x: 0, y: y };
        items.push({ top: y, bottom: y + g.h, left: -g.w / 2, right: g.w / 2, inX: 0, outX: 0,
                     inY: y, outY: y + g.h,
                     hasIn: f.chunks[g.c0].in !== undefined, hasOut: f.chunks[g.c1].out !== undefined });
        y += g.h + GAP;
        c = g.c1 + 1;
        continue;
      }
      if (g && g.c0 === c) { y += linked ? GAP : 0; frames.push({ g: ch.g, top: y, left: Infinity, right: -Infinity }); y += HEAD; }
      else if (linked && ch.in === undefined) y += GAP;
      var dx = ch.in !== undefined ? -ch.in : -ch.w / 2;
      F.chunkAt[c] = { x: dx, y: y };
      items.push({ top: y, bottom: y + ch.h, left: dx, right: dx + ch.w, inX: 0,
                   outX: ch.out !== undefined ? dx + ch.out : 0,
                   inY: y + (ch.iy || 0), outY: y + (ch.oy !== undefined ? ch.oy : ch.h),
                   hasIn: ch.in !== undefined, hasOut: ch.out !== undefined });
      if (g) {
        var fr = frames[frames.length - 1];
        fr.left = Math.min(fr.left, dx); fr.right = Math.max(fr.right, dx + ch.w);
        if (g.c1 === c) { fr.bottom = y + ch.h + 8; y += 8; }
      }
      y += ch.h + (ch.out !== undefined ? 0 : GAP);
      c++;
    }
    F.minX = Infinity; F.maxX = -Infinity;
    items.forEach(function (it) { F.minX = Math.min(F.minX, it.left); F.maxX = Math.max(F.maxX, it.right); });
    frames.forEach(function (fr) { F.minX = Math.min(F.minX, fr.left - PAD); F.maxX = Math.max(F.maxX, fr.right + PAD); });
    if (!items.length) { F.minX = 0; F.maxX = 0; }
    F.height = y;
    // Place the SVG that is already there.
    F.chunkEls.forEach(function (e, i) {
      var at = F.chunkAt[i];
      if (at) { e.setAttribute('transform', 'translate(' + at.x + ',' + at.y + ')'); e.style.display = ''; }
      else e.style.display = 'none';
    });
    F.boxEls.forEach(function (e, i) {
      var at = F.boxAt[i];
      if (at) { e.setAttribute('transform', 'translate(0,' + at.y + ')'); e.style.display = ''; }
      else e.style.display = 'none';
    });
    // Underlay: frames, links between stacked items, segment and region bands.
    var u = F.under;
    while (u.firstChild) u.removeChild(u.firstChild);
    frames.forEach(function (fr) {
      var gg = el('g', { 'class': 'frame', 'data-g': fr.g }, u);
      el('rect', { x: fr.left - PAD, y: fr.top, width: fr.right - fr.left + 2 * PAD,
                   height: fr.bottom - fr.top, rx: 10 }, gg);
      var t = el('text', { x: fr.left - PAD + 10, y: fr.top + 17 }, gg);
      t.textContent = '\u25be ' + f.groups[fr.g].label + '  (' + (f.groups[fr.g].o1 - f.groups[fr.g].o0 + 1) + ' ops, click to collapse)';
    });
    for (var k = 1; k < items.length; k++) {
      var a = items[k - 1], b = items[k];
      if (!b.hasIn || !a.hasOut) continue;
      var y0 = a.outY, y1 = b.inY, m = (y0 + y1) / 2;
      el('path', { 'class': 'link', d: 'M' + a.outX + ' ' + y0 + 'C' + a.outX + ' ' + m + ' ' + b.inX + ' ' + m + ' ' + b.inX + ' ' + y1 }, u);
    }
    drawBands(F);
  }

  /// Vertical extent of op i as drawn now (its group's box when collapsed).
  function opBox(F, i) {
    var o = F.f.ops[i], ch = F.f.chunks[o.c], at = F.chunkAt[o.c];
    if (at) {
      var k = i - F.firstOp[o.c];
      return { x: at.x + ch.xy[2 * k], y: at.y + ch.xy[2 * k + 1], h: 34 };
    }
    var b = F.boxAt[ch.g];
    if (!b) return null;
    return { x: 0, y: b.y + F.f.groups[ch.g].h / 2, h: F.f.groups[ch.g].h, box: ch.g };
  }

  function band(F, x, o0, o1, className, title, text) {
    var top = Infinity, bottom = -Infinity;
    for (var i = o0; i <= o1; i++) {
      var b = opBox(F, i);
      if (!b) continue;
      top = Math.min(top, b.y - b.h / 2); bottom = Math.max(bottom, b.y + b.h / 2);
    }
    if (top === Infinity) return;
    var r = el('rect', { 'class': className, x: x, y: top, width: 9, height: Math.max(bottom - top, 3), rx: 2 }, F.under);
    el('title', {}, r).textContent = title;
    // Label a band only where it is tall and no label is yet.
    if (text && bottom - top > 90 && top >= (F.labelledTo || -Infinity)) {
      F.labelledTo = bottom;
      var t = el('text', { 'class': 'bandtext', transform: 'translate(' + (x - 3) + ',' + (top + bottom) / 2 + ') rotate(-90)' }, F.under);
      t.textContent = text;
    }
  }

  function drawBands(F) {
    var x = F.minX - 30;
    F.labelledTo = -Infinity;
    var t = el('text', { 'class': 'bandlabel', x: x + 9, y: -6 }, F.under);
    t.textContent = 'segments';
    F.f.segments.forEach(function (s, k) {
      var p = s.fails ? 'blocks-ane-compile' : s.risk ? 'at-risk' : s.ane ? 'ane' : 'cpu-gpu';
      band(F, x, s.o0, s.o1, 'band p-' + p + (s.fails ? ' fails' : ''),
           'segment ' + (k + 1) + ' of ' + F.f.segments.length + ': ' + (s.ane ? 'ANE' : 'CPU/GPU') +
           (s.fails ? ', compile predicted to fail' : s.risk ? ', at risk' : '') + ', ' + (s.o1 - s.o0 + 1) + ' ops, ' + fmtFlops(s.flops),
           'segment ' + (k + 1) + ' \u00b7 ' + (s.ane ? (s.fails ? 'ANE, compile fails' : 'ANE') : 'CPU/GPU'));
    });
    if (!F.plan) return;
    var xr = x - 16;
    F.labelledTo = -Infinity;
    var t2 = el('text', { 'class': 'bandlabel', x: xr + 9, y: -18 }, F.under);
    t2.textContent = 'split regions';
    F.plan.regions.forEach(function (r) {
      if (!r.ops.length) return;
      var o0 = F.byName.get(r.ops[0].name), o1 = F.byName.get(r.ops[r.ops.length - 1].name);
      if (o0 === undefined || o1 === undefined) return;
      band(F, xr, o0, o1, 'band p-' + (r.target === 'ane' ? 'ane' : 'cpu-gpu'),
           'region ' + r.index + ': ' + r.target + ', ' + r.ops.length + ' ops, ~' + r.costMs.toFixed(3) + ' ms');
    });
  }

  // --- View: zoom and pan ----------------------------------------------------
  var current = fns[0];
  function apply() {
    var v = current.view;
    viewport.setAttribute('transform', 'translate(' + v.x + ',' + v.y + ') scale(' + v.k + ')');
  }
  function fit(F) {
    var r = svg.getBoundingClientRect(), w = (F.maxX - F.minX) + 70;
    var k = Math.max(0.3, Math.min(1.15, (r.width - 20) / w));
    F.view = { k: k, x: r.width / 2 - k * (F.minX - 40 + F.maxX) / 2, y: 28 };
    if (F === current) apply();
  }
  function zoomAt(factor, cx, cy) {
    var v = current.view, k = Math.max(0.05, Math.min(4, v.k * factor));
    v.x = cx - (cx - v.x) * k / v.k; v.y = cy - (cy - v.y) * k / v.k; v.k = k;
    apply();
  }
  function centerOn(F, i) {
    var b = opBox(F, i);
    if (!b) return;
    var r = svg.getBoundingClientRect(), v = F.view;
    if (v.k < 0.7) v.k = 0.9;
    v.x = r.width / 2 - v.k * b.x; v.y = r.height / 3 - v.k * b.y;
    apply();
  }
  function showFunction(F) {
    current = F;
    fns.forEach(function (G) { G.root.style.display = G === F ? '' : 'none'; });
    $$('.toolbar .tab').forEach(function (b) { b.classList.toggle('on', +b.getAttribute('data-f') === F.fi); });
    if (!F.view) fit(F); else apply();
    if (!selected || selected.F !== F) overview(F);
  }

  var drag = null, moved = false;
  svg.addEventListener('pointerdown', function (e) {
    if (e.button !== 0) return;
    drag = { x: e.clientX, y: e.clientY, vx: current.view.x, vy: current.view.y };
    moved = false;
  });
  window.addEventListener('pointermove', function (e) {
    if (!drag) return;
    var dx = e.clientX - drag.x, dy = e.clientY - drag.y;
    if (!moved && Math.abs(dx) + Math.abs(dy) < 4) return;
    if (!moved) svg.classList.add('dragging');
    moved = true;
    current.view.x = drag.vx + dx; current.view.y = drag.vy + dy;
    apply();
  });
  window.addEventListener('pointerup', function () { drag = null; svg.classList.remove('dragging'); });
  svg.addEventListener('wheel', function (e) {
    e.preventDefault();
    var r = svg.getBoundingClientRect();
    var d = e.deltaMode === 1 ? 16 : 1;
    if (e.ctrlKey || e.metaKey) zoomAt(Math.exp(-e.deltaY * d * 0.0022), e.clientX - r.left, e.clientY - r.top);
    else { current.view.x -= e.deltaX * d; current.view.y -= e.deltaY * d; apply(); }
  }, { passive: false });
  svg.addEventListener('click', function (e) {
    if (moved) { moved = false; return; }
    var t = e.target;
    var op = t.closest('g.op'), box = t.closest('g.gbox'), frame = t.closest('g.frame'), ref = t.closest('g.ref');
    if (op) selectOp(current, +op.getAttribute('data-i'), false);
    else if (ref) selectOp(current, +ref.getAttribute('data-ref'), true);
    else if (box) toggleGroup(current, +box.getAttribute('data-g'), false);
    else if (frame && t.tagName === 'text') toggleGroup(current, +frame.getAttribute('data-g'), true);
  });
  function toggleGroup(F, g, collapse) {
    var before = F.boxAt[g] || (F.chunkAt[F.f.groups[g].c0] ? { y: F.chunkAt[F.f.groups[g].c0].y - HEAD } : null);
    F.f.groups[g].collapsed = collapse;
    layout(F);
    // Keep the toggled group where it was on screen.
    var after = F.boxAt[g] || { y: F.chunkAt[F.f.groups[g].c0].y - HEAD };
    if (before) { F.view.y -= (after.y - before.y) * F.view.k; apply(); }
    refreshHits();
  }

  $$('.toolbar button[data-act]').forEach(function (b) {
    b.addEventListener('click', function () {
      var r = svg.getBoundingClientRect(), act = b.getAttribute('data-act');
      if (act === 'fit') fit(current);
      else if (act === 'in') zoomAt(1.25, r.width / 2, r.height / 2);
      else if (act === 'out') zoomAt(0.8, r.width / 2, r.height / 2);
      else {
        current.f.groups.forEach(function (g) { g.collapsed = act === 'collapse'; });
        if (act === 'collapse' && selected && selected.F === current) {
          var sg = current.f.chunks[current.f.ops[selected.i].c].g;
          if (sg != null) current.f.groups[sg].collapsed = false;
        }
        layout(current); refreshHits();
      }
    });
  });
  $$('.toolbar .tab').forEach(function (b) {
    b.addEventListener('click', function () { showFunction(fns[+b.getAttribute('data-f')]); });
  });
  document.addEventListener('keydown', function (e) {
    if (e.target.tagName === 'INPUT' || e.target.tagName === 'SELECT') return;
    var r = svg.getBoundingClientRect();
    if (e.key === '+' || e.key === '=') zoomAt(1.25, r.width / 2, r.height / 2);
    else if (e.key === '-') zoomAt(0.8, r.width / 2, r.height / 2);
    else if (e.key === '0') fit(current);
    else if (e.key === 'Escape') { clearSelection(); overview(current); }
  });
  var find = $('.toolbar .find');
  find.addEventListener('keydown', function (e) {
    if (e.key !== 'Enter') return;
    var q = find.value.trim().toLowerCase();
    if (!q) return;
    var ops = current.f.ops, start = selected && selected.F === current ? selected.i + 1 : 0;
    for (var n = 0; n < ops.length; n++) {
      var i = (start + n) % ops.length, o = ops[i];
      if (o.n.toLowerCase().indexOf(q) >= 0 || o.t.toLowerCase() === q || (o.tn || '').toLowerCase().indexOf(q) >= 0) {
        selectOp(current, i, true);
        return;
      }
    }
    find.style.outline = '2px solid #d8403a';
    setTimeout(function () { find.style.outline = ''; }, 600);
  });
  $$('td.strip svg').forEach(function (s) {
    s.addEventListener('click', function (e) {
      var row = s.closest('tr'), F = fns[+row.getAttribute('data-f')];
      var r = s.getBoundingClientRect(), n = F.f.ops.length;
      var i = Math.max(0, Math.min(n - 1, Math.floor((e.clientX - r.left) / r.width * n)));
      if (F !== current) showFunction(F);
      selectOp(F, i, true);
    });
  });

  // --- Selection and the details panel ------------------------------------
  var selected = null;
  function clearSelection() {
    $$('.op.sel, .gbox.sel', svg).forEach(function (e) { e.classList.remove('sel'); });
    $$('path.hl', svg).forEach(function (e) { e.classList.remove('hl'); });
    $$('tr.row.sel').forEach(function (e) { e.classList.remove('sel'); });
    selected = null;
  }
  function selectOp(F, i, center) {
    if (F !== current) showFunction(F);
    var g = F.f.chunks[F.f.ops[i].c].g;
    if (g != null && F.f.groups[g].collapsed) { F.f.groups[g].collapsed = false; layout(F); refreshHits(); center = true; }
    clearSelection();
    selected = { F: F, i: i };
    F.opEls[i].classList.add('sel');
    $$('path[data-u="' + i + '"], path[data-v="' + i + '"]', F.root).forEach(function (p) { p.classList.add('hl'); });
    details(F, i);
    if (center) centerOn(F, i);
  }

  function findingCard(fd) {
    var known = { rule: 1, title: 1, effect: 1, level: 1, confidence: 1, 'function': 1, op: 1, opType: 1, types: 1,
                  torchNode: 1, debugHandles: 1, message: 1, evidence: 1, fix: 1, remedies: 1,
                  failEvidence: 1, passEvidence: 1, source: 1 };
    var s = '<div class="finding e-' + cls(sev(fd)) + '"><div class="fh">' + chip('effect', sev(fd)) +
            ' <b>' + h(fd.rule) + '</b> <span>' + h(fd.title || '') + '</span><span class="conf">' +
            h(fd.confidence || '') + '</span></div><p>' + h(fd.message) + '</p>';
    if (fd.source) {
      // The PyTorch line behind the op (check --etrecord), or why there is none.
      var src = fd.source;
      s += '<div class="src"><b>Source:</b> ' +
           (src.line ? h(src.file + ':' + src.line) + (src.module ? ' in ' + h(src.module) : '') +
                       (src.code ? ' <code>' + h(src.code) + '</code>' : '')
                     : h('none: ' + (src.note || ''))) +
           (src.buffer ? ' <span class="buf">' + (src.bufferAccess === 'writes' ? 'written back into ' : 'reads ') + h(src.buffer) + '</span>' : '') + '</div>';
    }
    if (fd.types) s += '<div class="types">' + h(fd.types) + '</div>';
    if (fd.fix) s += '<div class="fix"><b>Fix:</b> ' + h(fd.fix) + '</div>';
    if (fd.remedies && fd.remedies.length) {
      s += '<div class="rem"><b>Remedies:</b><ul>';
      fd.remedies.forEach(function (r) { s += '<li>' + value(r) + '</li>'; });
      s += '</ul></div>';
    }
    Object.keys(fd).forEach(function (k) {
      if (!known[k]) s += '<div class="extra"><b>' + h(k) + ':</b> ' + value(fd[k]) + '</div>';
    });
    // Evidence both ways when the report has it (url and what it shows),
    // else the plain list of links.
    var cases = function (title, list) {
      if (!list || !list.length) return '';
      return '<div class="ev"><b>' + title + '</b><ul>' + list.map(function (c) {
        return '<li>' + link(c.url || String(c)) + (c.what ? '<span class="what">' + h(c.what) + '</span>' : '') + '</li>';
      }).join('') + '</ul></div>';
    };
    if (fd.failEvidence || fd.passEvidence) {
      s += cases('Evidence it fails:', fd.failEvidence) + cases('Evidence it works:', fd.passEvidence);
    } else if (fd.evidence && fd.evidence.length) {
      s += '<div class="ev"><b>Evidence:</b>';
      fd.evidence.forEach(function (u) { s += link(u); });
      s += '</div>';
    }
    return s + '</div>';
  }
  function link(u) {
    return /^https?:\/\//.test(u) ? '<a href="' + h(u) + '" target="_blank" rel="noopener noreferrer">' + h(u) + '</a>' : h(u);
  }
  /// Any JSON value, readably: strings (links when URLs), lists, objects.
  function value(v) {
    if (v == null) return '';
    if (typeof v === 'string') return link(v);
    if (Array.isArray(v)) return v.map(value).join(', ');
    if (typeof v === 'object') {
      return Object.keys(v).map(function (k) { return '<i>' + h(k) + '</i>: ' + value(v[k]); }).join('; ');
    }
    return h(String(v));
  }

  function opLink(F, i) {
    var o = F.f.ops[i];
    return '<a href="#" data-f="' + F.fi + '" data-op="' + i + '">' + h(o.t) + ' <code>' + h(o.n) + '</code></a>';
  }
  function groupOf(F, i) { var g = F.f.chunks[F.f.ops[i].c].g; return g == null ? null : F.f.groups[g]; }

  function details(F, i) {
    var o = F.f.ops[i], seg = F.f.segments[o.s], grp = groupOf(F, i);
    var s = '<div class="crumbs"><a href="#" data-back="1">\u2190 overview</a></div>' +
            '<h3>' + chip('placement', o.p) + ' <code>' + h(o.t) + '</code></h3>' +
            '<div class="opname"><code>' + h(o.n) + '</code></div><table class="kv">' +
            '<tr><th>placement</th><td>' + h(meaning('placement', o.p) || o.p) + '</td></tr>';
    if (o.r.length) {
      s += '<tr><th>decided by</th><td>' + o.r.map(function (c) {
        var r = rules[c];
        return '<b>' + h(c) + '</b> ' + h(r ? r.title : '') + (F.wideRules.has(c) ? ' <span class="tag">function-wide</span>' : '');
      }).join('<br>') + '</td></tr>';
    }
    s += '<tr><th>FLOPs</th><td>' + fmtFlops(o.f) + '</td></tr>';
    if (seg) s += '<tr><th>segment</th><td>' + (o.s + 1) + ' of ' + F.f.segments.length + ' \u00b7 ' +
                  (seg.ane ? 'ANE' : 'CPU/GPU') + (seg.fails ? ' (compile predicted to fail)' : '') +
                  ' \u00b7 ' + (seg.o1 - seg.o0 + 1) + (seg.o1 === seg.o0 ? ' op' : ' ops') + '</td></tr>';
    if (grp) s += '<tr><th>block</th><td>' + h(grp.label) + '</td></tr>';
    s += '<tr><th>PyTorch node</th><td>' + (o.tn ? '<code>' + h(o.tn) + '</code>' : '<i>none in the op name</i>') + '</td></tr>';
    if (o.dh) s += '<tr><th>ExecuTorch debug handle</th><td>' + o.dh.map(h).join(', ') + '</td></tr>';
    if (o.sr) s += '<tr><th>reads state</th><td><code>' + o.sr.map(h).join(', ') + '</code></td></tr>';
    if (o.sw) s += '<tr><th>writes state</th><td><code>' + o.sw.map(h).join(', ') + '</code></td></tr>';
    if (o.ret) s += '<tr><th>model output</th><td><code>' + o.ret.map(h).join(', ') + '</code></td></tr>';
    s += '</table>';
    var mine = F.findings[i];
    s += '<h4>Findings on this op (' + mine.length + ')</h4>';
    if (!mine.length) s += '<div class="tip">No rule fires on this op.</div>';
    mine.slice().sort(function (a, b) { return effectRank(sev(check.findings[a])) - effectRank(sev(check.findings[b])); })
      .forEach(function (k) { s += findingCard(check.findings[k]); });
    var wide = F.wide.filter(function (k) { return o.r.indexOf(check.findings[k].rule) >= 0; });
    if (wide.length) {
      s += '<h4>Function-wide findings that place it</h4>';
      wide.forEach(function (k) { s += findingCard(check.findings[k]); });
    }
    s += '<h4>Inputs</h4><table class="ios">';
    o['in'].forEach(function (a) {
      var from = a[3] === 'op' ? opLink(F, a[4]) : '<span class="tag">' + h(a[3]) + '</span>';
      s += '<tr><td>' + h(a[0]) + '</td><td><code>' + h(a[1]) + '</code> ' + h(a[2]) + '<br>from ' + from + '</td></tr>';
    });
    s += '</table><h4>Outputs</h4><table class="ios">';
    o.out.forEach(function (a) { s += '<tr><td><code>' + h(a[0]) + '</code></td><td>' + h(a[1]) + '</td></tr>'; });
    s += '</table>';
    if (o.u && o.u.length) {
      s += '<h4>Used by</h4>';
      s += o.u.slice(0, 12).map(function (j) { return opLink(F, j); }).join('<br>');
      if (o.u.length > 12) s += '<br>\u2026 and ' + (o.u.length - 12) + ' more';
    }
    panel.innerHTML = s;
    panel.scrollTop = 0;
  }

  /// Why ops leave the ANE: each deciding rule with the ops it places off.
  function overview(F) {
    var count = new Map(), byPlacement = {};
    F.f.ops.forEach(function (o) {
      byPlacement[o.p] = (byPlacement[o.p] || 0) + 1;
      if (o.p === 'ane') return;
      o.r.forEach(function (c) {
        var key = c + '\u0000' + o.p;
        count.set(key, (count.get(key) || 0) + 1);
      });
    });
    var rows = Array.from(count.entries()).map(function (e) {
      var parts = e[0].split('\u0000');
      return { rule: parts[0], p: parts[1], n: e[1] };
    }).sort(function (a, b) { return b.n - a.n || (a.rule < b.rule ? -1 : 1); });
    var s = '<h3>What keeps ops off the ANE in <code>' + h(F.f.name) + '</code></h3>';
    if (!F.f.ops.length) s += '<div class="tip">This function has no ops.</div>';
    else if (!rows.length) s += '<div class="tip">Every op of this function is predicted on the ANE.</div>';
    s += '<ul class="reasons">';
    rows.forEach(function (r) {
      var info = rules[r.rule] || {}, fd = null, wide = F.wideRules.has(r.rule);
      for (var k = 0; k < check.findings.length; k++)
        if (check.findings[k].rule === r.rule && (!wide || check.findings[k].op == null)) { fd = check.findings[k]; break; }
      s += '<li data-rule="' + h(r.rule) + '"><span>' + chip('placement', r.p) + '<br><span class="n">' + r.n +
           '</span> op' + (r.n === 1 ? '' : 's') + '</span><span><b>' + h(r.rule) + '</b> <span class="rt">' +
           h(info.title || '') + '</span>' + (wide ? ' <span class="tag">function-wide</span>' : '') +
           (fd && wide ? '<br><span class="rt">' + h(fd.message) + '</span>' : '') +
           '</span>' + (fd && fd.fix ? '<span class="fx">Fix: ' + h(fd.fix) + '</span>' : '') + '</li>';
    });
    s += '</ul>';
    var other = F.wide.filter(function (k) {
      return !rows.some(function (r) { return r.rule === check.findings[k].rule; });
    });
    if (other.length) {
      // One card per rule; the rule's other findings listed under it.
      s += '<h4>Other function-wide findings</h4>';
      var byRule = new Map();
      other.forEach(function (k) {
        var r = check.findings[k].rule;
        if (!byRule.has(r)) byRule.set(r, []);
        byRule.get(r).push(k);
      });
      byRule.forEach(function (ks) {
        s += findingCard(check.findings[ks[0]]);
        if (ks.length > 1) {
          s += '<details class="more"><summary>' + (ks.length - 1) + ' more ' + h(check.findings[ks[0]].rule) +
               '</summary><ul>' + ks.slice(1).map(function (k) { return '<li>' + h(check.findings[k].message) + '</li>'; }).join('') +
               '</ul></details>';
        }
      });
    }
    s += '<div class="tip">Click a reason to mark its ops, an op to see its findings, a collapsed block to open it. ' +
         'The left bands are the ANE and CPU/GPU segments in program order' + (F.plan ? ', then the split regions' : '') + '.</div>';
    panel.innerHTML = s;
  }
  panel.addEventListener('click', function (e) {
    var a = e.target.closest('a[data-op]'), back = e.target.closest('a[data-back]'), li = e.target.closest('li[data-rule]');
    if (a) { e.preventDefault(); selectOp(fns[+a.getAttribute('data-f')], +a.getAttribute('data-op'), true); }
    else if (back) { e.preventDefault(); clearSelection(); overview(current); }
    else if (li) { setFilter({ rule: li.getAttribute('data-rule'), decided: true }); }
  });

  // --- Findings table ------------------------------------------------------
  var tbody = $('table.ftable tbody'), filters = $('.findings .filters');
  var effects = [], ruleCount = {};
  check.findings.forEach(function (fd) {
    if (effects.indexOf(sev(fd)) < 0) effects.push(sev(fd));
    ruleCount[fd.rule] = (ruleCount[fd.rule] || 0) + 1;
  });
  effects.sort(function (a, b) { return effectRank(a) - effectRank(b); });
  var fs = '';
  effects.forEach(function (e) {
    var n = check.findings.filter(function (fd) { return sev(fd) === e; }).length;
    fs += '<button class="eff on e-' + cls(e) + '" data-e="' + h(e) + '">' + h(label('effect', e)) + ' ' + n + '</button>';
  });
  fs += '<select class="rule"><option value="">all rules</option>' + Object.keys(ruleCount).sort().map(function (r) {
    return '<option value="' + h(r) + '">' + h(r) + ' (' + ruleCount[r] + ') ' + h(rules[r] ? rules[r].title : '') + '</option>';
  }).join('') + '</select>';
  // With the export's ETRecord (check --etrecord): the findings by module,
  // each layer's copy of a module as one group (layers.*.conv), and a
  // source column.
  var moduleCount = {};
  check.findings.forEach(function (fd) {
    var m = moduleGroup(fd);
    if (m) moduleCount[m] = (moduleCount[m] || 0) + 1;
  });
  var modules = Object.keys(moduleCount).sort(function (a, b) { return moduleCount[b] - moduleCount[a] || (a < b ? -1 : 1); });
  if (modules.length) {
    fs += '<select class="module"><option value="">all modules</option>' + modules.map(function (m) {
      return '<option value="' + h(m) + '">' + h(m) + ' (' + moduleCount[m] + ')</option>';
    }).join('') + '</select>';
    $('table.ftable thead tr').insertAdjacentHTML('beforeend', '<th>source</th>');
  }
  fs += '<input type="search" class="q" placeholder="filter text"><button class="reset">show all</button><span class="count"></span>';
  filters.innerHTML = fs;
  var rowsHtml = '';
  check.findings.forEach(function (fd, k) {
    var src = fd.source || {};
    rowsHtml += '<tr class="row" data-k="' + k + '"><td>' + chip('effect', sev(fd)) + '</td><td><b>' + h(fd.rule) +
      '</b></td><td>' + h(fd.confidence || '') + '</td><td>' + h(fd['function']) + '</td><td>' +
      (fd.op ? h(fd.opType || '') + ' <code>' + h(fd.op) + '</code>' : '<i>function</i>') + '</td><td class="msg">' + h(fd.message) + '</td>' +
      (modules.length ? '<td class="src">' + (src.file ? '<code>' + h(src.file + ':' + src.line) + '</code> ' : '') + h(src.module || '') + '</td>' : '') + '</tr>';
  });
  tbody.innerHTML = rowsHtml;
  var rowEls = $$('tr.row', tbody);
  var filter = { effects: new Set(effects), rule: '', module: '', q: '', decided: false };
  function setFilter(f) {
    if (f.rule !== undefined) { filter.rule = f.rule; $('select.rule', filters).value = f.rule; }
    filter.decided = !!f.decided;
    runFilter();
  }
  function matches(fd) {
    if (!filter.effects.has(sev(fd))) return false;
    if (filter.rule && fd.rule !== filter.rule) return false;
    if (filter.module && moduleGroup(fd) !== filter.module) return false;
    if (filter.q) {
      var q = filter.q, src = fd.source || {};
      if ((fd.message + ' ' + (fd.op || '') + ' ' + fd.rule + ' ' + (fd.opType || '') + ' ' + (fd.torchNode || '') + ' ' +
           (src.file ? src.file + ':' + src.line : '') + ' ' + (src.module || '')).toLowerCase().indexOf(q) < 0) return false;
    }
    return true;
  }
  function active() { return filter.rule || filter.module || filter.q || filter.effects.size !== effects.length; }
  function runFilter() {
    var shown = 0;
    check.findings.forEach(function (fd, k) {
      var ok = matches(fd);
      rowEls[k].style.display = ok ? '' : 'none';
      shown += ok;
    });
    $('.count', filters).textContent = shown + ' of ' + check.findings.length + ' findings' +
      (active() ? ' \u00b7 their ops are marked in the graph' : '');
    refreshHits();
  }
  /// Marks the ops of the shown findings (and, for a reason picked in the
  /// overview, the ops that rule placed) and dims the rest.
  var hitsShown = false;
  function refreshHits() {
    var on = active();
    if (!on && !hitsShown) return;
    hitsShown = !!on;
    fns.forEach(function (F) {
      var hit = new Set();
      if (on) {
        check.findings.forEach(function (fd, k) {
          if (fd['function'] !== F.f.name || !matches(fd)) return;
          var i = fd.op != null ? F.byName.get(fd.op) : undefined;
          if (i !== undefined) hit.add(i);
        });
        if (filter.rule && (filter.decided || F.wideRules.has(filter.rule)))
          F.f.ops.forEach(function (o, i) { if (o.r.indexOf(filter.rule) >= 0) hit.add(i); });
      }
      F.opEls.forEach(function (e, i) { e.classList.toggle('hit', hit.has(i)); });
      F.boxEls.forEach(function (e, g) {
        var G = F.f.groups[g], any = false;
        for (var i = G.o0; i <= G.o1 && !any; i++) any = hit.has(i);
        e.classList.toggle('hit', any);
      });
    });
    svg.classList.toggle('filtering', !!on);
  }
  filters.addEventListener('click', function (e) {
    var b = e.target.closest('button.eff');
    if (b) {
      var eff = b.getAttribute('data-e');
      if (filter.effects.has(eff)) filter.effects['delete'](eff); else filter.effects.add(eff);
      b.classList.toggle('on', filter.effects.has(eff));
      runFilter();
    } else if (e.target.closest('button.reset')) {
      filter.effects = new Set(effects); filter.rule = ''; filter.module = ''; filter.q = '';
      $$('button.eff', filters).forEach(function (x) { x.classList.add('on'); });
      $('select.rule', filters).value = ''; $('input.q', filters).value = '';
      if (modules.length) $('select.module', filters).value = '';
      runFilter();
    }
  });
  $('select.rule', filters).addEventListener('change', function (e) { setFilter({ rule: e.target.value }); });
  if (modules.length)
    $('select.module', filters).addEventListener('change', function (e) { filter.module = e.target.value; runFilter(); });
  $('input.q', filters).addEventListener('input', function (e) { filter.q = e.target.value.trim().toLowerCase(); runFilter(); });
  tbody.addEventListener('click', function (e) {
    var tr = e.target.closest('tr.row');
    if (!tr) return;
    var fd = check.findings[+tr.getAttribute('data-k')], F = byFnName.get(fd['function']);
    if (!F) return;
    var i = fd.op != null ? F.byName.get(fd.op) : undefined;
    if (i === undefined) { showFunction(F); clearSelection(); overview(F); }
    else selectOp(F, i, true);
    tr.classList.add('sel');
    $('section.graph').scrollIntoView({ block: 'nearest', behavior: 'smooth' });
  });

  // --- Split plan -------------------------------------------------------------
  if (split) {
    var ps = '';
    split.functions.forEach(function (fp) {
      var F = byFnName.get(fp.function), ane = fp.regions.filter(function (r) { return r.target === 'ane'; }).length;
      ps += '<h3><code>' + h(fp.function) + '</code>: ' + fp.regions.length + ' regions (' + ane + ' ANE, ' +
            (fp.regions.length - ane) + ' CPU), ' + fp.boundaries.length + ' boundaries, estimated ' +
            fp.planCostMs.toFixed(3) + ' ms (CPU only ' + fp.cpuOnlyCostMs.toFixed(3) + ' ms)</h3>';
      ps += '<table><thead><tr><th>region</th><th>target</th><th>ops</th><th>from</th><th>to</th><th>inputs</th><th>outputs</th><th>states</th><th>est. ms</th></tr></thead><tbody>';
      fp.regions.forEach(function (r) {
        var absorbed = r.ops.filter(function (o) { return o.absorbed; }).length;
        var first = r.ops.length ? F && F.byName.get(r.ops[0].name) : undefined;
        var last = r.ops.length ? F && F.byName.get(r.ops[r.ops.length - 1].name) : undefined;
        ps += '<tr><td>' + r.index + '</td><td>' + chip('placement', r.target === 'ane' ? 'ane' : 'cpu-gpu') + '</td><td>' +
              r.ops.length + (absorbed ? ' (' + absorbed + ' absorbed)' : '') + '</td><td>' +
              (first !== undefined ? opLink(F, first) : '') + '</td><td>' + (last !== undefined ? opLink(F, last) : '') + '</td><td>' +
              r.inputs.length + '</td><td>' + r.outputs.length + '</td><td>' + r.states.length + '</td><td>' + r.costMs.toFixed(3) + '</td></tr>';
        if (F) r.ops.forEach(function (o) {
          var i = F.byName.get(o.name);
          if (o.absorbed && i !== undefined) F.opEls[i].classList.add('absorbed');
        });
      });
      ps += '</tbody></table>';
      if (fp.boundaries.length) {
        ps += '<h4>Why each boundary exists</h4><table><thead><tr><th>from</th><th>to</th><th>values</th><th>reason</th></tr></thead><tbody>';
        fp.boundaries.forEach(function (b) {
          ps += '<tr><td>' + b.from + '</td><td>' + b.to + '</td><td><code>' + b.values.map(h).join(', ') + '</code></td><td>' + h(b.reason) + '</td></tr>';
        });
        ps += '</tbody></table>';
      }
      fp.warnings.forEach(function (w) { ps += '<p><b>warning:</b> ' + h(w) + '</p>'; });
    });
    ps += '<h3>ExecuTorch skip list</h3>';
    if (split.skipOps.length) ps += '<pre>' + h(split.skipListSnippet) + '</pre>';
    else ps += '<p>No op needs <code>skip_ops_for_coreml_delegation</code>.</p>';
    if (split.unmappedCpuOps.length)
      ps += '<p>CPU ops without a PyTorch node name (not in the skip list): <code>' + split.unmappedCpuOps.map(h).join(', ') + '</code></p>';
    $('.plan-body').innerHTML = ps;
    $('.plan-body').addEventListener('click', function (e) {
      var a = e.target.closest('a[data-op]');
      if (!a) return;
      e.preventDefault();
      selectOp(fns[+a.getAttribute('data-f')], +a.getAttribute('data-op'), true);
      $('section.graph').scrollIntoView({ block: 'nearest', behavior: 'smooth' });
    });
  }

  // --- Start ------------------------------------------------------------------
  fns.forEach(layout);
  showFunction(fns[0]);
  runFilter();
  var t1 = performance.now();
  window.anefitReport = { initMs: t1 - t0, selectOp: function (fi, i) { selectOp(fns[fi], i, true); } };
  document.documentElement.setAttribute('data-ready', '1');
  requestAnimationFrame(function () {
    requestAnimationFrame(function () {
      window.anefitReport.paintedMs = performance.now();
      document.documentElement.setAttribute('data-painted', String(Math.round(performance.now())));
    });
  });
})();
