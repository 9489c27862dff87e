// Earmark's page: identify a file (POST /v1/match), listen live (GET /v1/listen over a WebSocket) and browse the
// catalog (GET /v1/tracks?q=). Plain JavaScript, no build step; every request goes to the server that served it.
'use strict';

const $ = (id) => document.getElementById(id);

function clock(seconds) {
  if (!Number.isFinite(seconds) || seconds < 0) seconds = 0;
  const s = Math.floor(seconds), h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
  return (h ? h + ':' + String(m).padStart(2, '0') : String(m)) + ':' + String(r).padStart(2, '0');
}

// A length to the nearest second, as the command line prints it (clock() floors: it shows a running position).
function length(seconds) { return clock(Math.round(seconds)); }

function el(tag, props, ...children) {
  const node = document.createElement(tag);
  Object.assign(node, props || {});
  for (const c of children) node.append(c);
  return node;
}

function trackName(track) { return track.title || ('Track ' + track.id); }
function trackBy(track) {
  return [track.artist, track.album].filter(Boolean).join(' — ') || (track.sourcePath || '').split('/').pop();
}

// MARK: Access token (a server started with --read-token-file needs one; kept for this tab only)

const tokenKey = 'earmark.token';
function token() { return sessionStorage.getItem(tokenKey) || ''; }

// fetch with the token, when one was given, as a bearer header.
function api(url, init) {
  const options = Object.assign({}, init || {});
  const headers = Object.assign({}, options.headers || {});
  if (token()) headers['Authorization'] = 'Bearer ' + token();
  options.headers = headers;
  return fetch(url, options);
}

async function errorText(response) {
  try {
    const body = await response.json();
    if (body && body.error) return body.error.message + ' (' + body.error.code + ')';
  } catch (e) { /* not JSON */ }
  return 'HTTP ' + response.status;
}

// MARK: Catalog

const catalog = { query: '', offset: 0, next: null, current: null };

async function loadStats() {
  try {
    const r = await api('/v1/catalog');
    if (!r.ok) throw new Error(await errorText(r));
    const s = await r.json();
    const hours = s.totalDuration / 3600;
    $('stats').textContent = s.trackCount + ' track' + (s.trackCount === 1 ? '' : 's') + ' · ' +
      (hours >= 1 ? hours.toFixed(1) + ' h' : length(s.totalDuration)) + ' of audio';
  } catch (e) {
    $('stats').textContent = 'catalog unavailable: ' + e.message;
  }
}

async function loadTracks(append) {
  const q = catalog.query;
  const offset = append ? catalog.next : 0;
  const params = new URLSearchParams({ limit: '25', offset: String(offset) });
  if (q) params.set('q', q);
  const r = await api('/v1/tracks?' + params);
  if (q !== catalog.query) return;  // a newer search started meanwhile
  const body = $('tracks');
  if (!append) body.replaceChildren();
  if (!r.ok) {
    body.append(el('tr', {}, el('td', { colSpan: 5, className: 'error', textContent: await errorText(r) })));
    return;
  }
  const page = await r.json();
  for (const t of page.tracks) {
    const row = el('tr', { id: 'track-' + t.id, className: 'clickable', title: 'Show this track and its timeline' },
      el('td', { className: 'num', textContent: String(t.id) }),
      el('td', {}, el('a', { href: trackLink(t.id), textContent: trackName(t) })),
      el('td', { textContent: t.artist || '' }),
      el('td', { textContent: t.album || '' }),
      el('td', { className: 'num', textContent: length(t.duration) }));
    if (catalog.current === t.id) row.classList.add('current');
    body.append(row);
  }
  if (!append && page.tracks.length === 0) {
    body.append(el('tr', {}, el('td', { colSpan: 5, className: 'busy', textContent: q ? 'No track matches “' + q + '”.' : 'The catalog is empty.' })));
  }
  catalog.next = page.nextOffset;
  $('more').hidden = page.nextOffset === null;
  $('tracks-count').textContent = page.total + (q ? ' matching' : '') + ' track' + (page.total === 1 ? '' : 's');
}

function markCurrent(id) {
  catalog.current = id;
  for (const row of document.querySelectorAll('.tracks tr.current')) row.classList.remove('current');
  const row = id !== null && $('track-' + id);
  if (row) row.classList.add('current');
}

let searchTimer = 0;
$('search').addEventListener('input', () => {
  clearTimeout(searchTimer);
  searchTimer = setTimeout(() => { catalog.query = $('search').value.trim(); loadTracks(false); }, 200);
});
$('more').addEventListener('click', () => loadTracks(true));
$('tracks').addEventListener('click', (e) => {
  const row = e.target.closest('tr.clickable');
  if (row && !e.target.closest('a')) location.hash = trackLink(Number(row.id.slice('track-'.length)));
});

// MARK: A track: its metadata and its analysis timeline (GET /v1/tracks/{id} and …/timeline.svg)

// `#track=ID` (and `&from=S&to=S`, a stretch to highlight) shows the track card; the links of the catalog and of
// the matches point there, so the back button and a shared link work.
function trackLink(id, from, to) {
  let link = '#track=' + id;
  if (Number.isFinite(from) && Number.isFinite(to)) link += '&from=' + from.toFixed(2) + '&to=' + to.toFixed(2);
  return link;
}

function fact(name, value) {
  return value === undefined || value === null || value === '' ? [] : [el('dt', { textContent: name }), el('dd', { textContent: value })];
}

function describeTrack(t) {
  const a = t.analysis || {};
  const facts = [];
  facts.push(...fact('Length', length(t.duration)));
  if (a.key) facts.push(...fact('Key', a.key.tonic + ' ' + a.key.mode));
  if (a.rhythm && a.rhythm.bpm) facts.push(...fact('Tempo', a.rhythm.bpm.toFixed(1) + ' BPM, ' + a.rhythm.beatsPerBar + ' beats a bar'));
  if (a.loudness && a.loudness.integrated !== null) facts.push(...fact('Loudness', a.loudness.integrated.toFixed(1) + ' LUFS'));
  if (a.sound && a.sound.dominant && a.sound.dominant.length) {
    facts.push(...fact('Sounds', a.sound.dominant.slice(0, 3).map((d) => d.label + ' ' + Math.round(d.share * 100) + '%').join(', ')));
  }
  for (const key of Object.keys(t.metadata || {}).sort()) {
    const v = t.metadata[key];
    facts.push(...fact(key, typeof v === 'string' ? v : JSON.stringify(v)));
  }
  facts.push(...fact('Track', '#' + t.id + (t.addedAt ? ', added ' + t.addedAt.replace('T', ' ').replace(/\.\d+/, '') : '')));
  if (t.sourcePath) facts.push(...fact('Source', t.sourcePath));
  return facts;
}

// The server's SVG, put into the page as an element (so its tooltips work); anything active is removed first.
function inlineSVG(text) {
  const doc = new DOMParser().parseFromString(text, 'image/svg+xml');
  const svg = doc.documentElement;
  if (svg.nodeName !== 'svg') throw new Error('the timeline is not an SVG picture');
  for (const node of svg.querySelectorAll('script, foreignObject')) node.remove();
  for (const node of [svg, ...svg.querySelectorAll('*')]) {
    for (const attr of [...node.attributes]) if (/^on/i.test(attr.name) || /^\s*javascript:/i.test(attr.value)) node.removeAttribute(attr.name);
  }
  // The card has the track's title already: crop the picture's own heading.
  const heading = parseFloat(svg.getAttribute('data-heading-height'));
  const [x, y, w, h] = (svg.getAttribute('viewBox') || '').split(/\s+/).map(Number);
  if (heading > 0 && heading < h && y === 0) {
    svg.setAttribute('viewBox', [x, heading, w, h - heading].join(' '));
    svg.setAttribute('height', String(h - heading));
  }
  return document.importNode(svg, true);
}

// A guide under the pointer with the time there, so any mark of the timeline can be read off.
function followPointer(svg) {
  const ns = 'http://www.w3.org/2000/svg';
  const x0 = parseFloat(svg.getAttribute('data-plot-x')), w = parseFloat(svg.getAttribute('data-plot-width'));
  const duration = parseFloat(svg.getAttribute('data-duration'));
  const axis = svg.querySelector('g.axis line:last-of-type');
  if (!(duration > 0) || !axis) return;
  const bottom = parseFloat(axis.getAttribute('y1'));
  const top = (parseFloat(svg.getAttribute('data-heading-height')) || 0) + 13;
  const guide = document.createElementNS(ns, 'g');
  guide.setAttribute('pointer-events', 'none');
  guide.style.display = 'none';
  const line = document.createElementNS(ns, 'line');
  for (const [k, v] of [['y1', top], ['y2', bottom], ['stroke', '#6b7385'], ['stroke-dasharray', '3 3']]) line.setAttribute(k, String(v));
  const label = document.createElementNS(ns, 'text');
  for (const [k, v] of [['y', bottom + 18], ['font-size', '12'], ['font-weight', '600'], ['fill', '#1d2330'],
    ['stroke', '#ffffff'], ['stroke-width', '3'], ['paint-order', 'stroke'], ['text-anchor', 'middle']]) label.setAttribute(k, String(v));
  guide.append(line, label);
  svg.append(guide);
  svg.addEventListener('pointermove', (e) => {
    const point = new DOMPoint(e.clientX, e.clientY).matrixTransform(svg.getScreenCTM().inverse());
    if (point.x < x0 || point.x > x0 + w || point.y < top || point.y > bottom) { guide.style.display = 'none'; return; }
    guide.style.display = '';
    line.setAttribute('x1', String(point.x));
    line.setAttribute('x2', String(point.x));
    label.setAttribute('x', String(point.x));
    label.textContent = clock((point.x - x0) / w * duration);
  });
  svg.addEventListener('pointerleave', () => { guide.style.display = 'none'; });
}

const shown = { request: 0, id: null };
async function showTrack(id, from, to) {
  const card = $('track-card'), box = $('track-timeline');
  const request = ++shown.request;
  shown.id = id;
  card.hidden = false;
  $('track-title').textContent = 'Track ' + id;
  $('track-sub').textContent = '';
  $('track-facts').replaceChildren();
  box.replaceChildren(el('div', { className: 'busy', textContent: 'Drawing the timeline…' }));
  const highlighted = Number.isFinite(from) && Number.isFinite(to);
  $('track-note').hidden = !highlighted;
  if (highlighted) $('track-note').textContent = 'The highlighted stretch, ' + length(from) + '–' + length(to) + ', is where the clip matched.';
  try {
    const width = Math.max(480, Math.min(4000, Math.round(box.clientWidth || 1000)));
    const params = new URLSearchParams({ width: String(width) });
    if (highlighted) { params.set('from', String(from)); params.set('to', String(to)); }
    const [info, picture] = await Promise.all([api('/v1/tracks/' + id), api('/v1/tracks/' + id + '/timeline.svg?' + params)]);
    if (request !== shown.request) return;   // another track was asked for meanwhile
    if (!info.ok) throw new Error(await errorText(info));
    if (!picture.ok) throw new Error(await errorText(picture));
    const track = await info.json();
    $('track-title').textContent = trackName(track);
    $('track-sub').textContent = [track.artist, track.album].filter(Boolean).join(' — ');
    $('track-facts').replaceChildren(...describeTrack(track));
    box.replaceChildren(inlineSVG(await picture.text()));
    followPointer(box.firstChild);
  } catch (e) {
    if (request === shown.request) box.replaceChildren(el('div', { className: 'error', textContent: 'Track ' + id + ': ' + e.message }));
  }
}

function route() {
  const params = new URLSearchParams(location.hash.slice(1));
  const id = Number(params.get('track'));
  if (!Number.isInteger(id) || id <= 0) {
    $('track-card').hidden = true;
    return;
  }
  showTrack(id, parseFloat(params.get('from')), parseFloat(params.get('to')));
  $('track-card').scrollIntoView({ block: 'start' });
}
window.addEventListener('hashchange', route);
$('track-close').addEventListener('click', (e) => {
  e.preventDefault();
  history.pushState(null, '', location.pathname + location.search);
  route();
});

// MARK: Identify a file

async function identify(file) {
  const out = $('file-result');
  out.replaceChildren(el('div', { className: 'busy', textContent: 'Identifying ' + file.name + '…' }));
  try {
    const r = await api('/v1/match?maxMatches=3&name=' + encodeURIComponent(file.name), {
      method: 'POST', body: file, headers: { 'Content-Type': file.type || 'application/octet-stream' },
    });
    if (!r.ok) throw new Error(await errorText(r));
    const report = await r.json();
    out.replaceChildren();
    if (report.matches.length === 0) {
      out.append(el('div', { className: 'busy', id: 'file-nomatch', textContent: 'No match for ' + file.name + '.' }));
      return;
    }
    const links = [];
    for (const m of report.matches) {
      // Where the clip lies in the track: from its offset, as long as the clip (at the track's pace).
      const from = Math.max(0, m.matchOffset);
      const to = Math.min(m.track.duration, m.matchOffset + report.queryDuration * (m.timeScale || 1));
      const link = trackLink(m.track.id, from, Math.max(from, to));
      links.push(link);
      out.append(el('div', { className: 'match' },
        el('div', { className: 'title', textContent: trackName(m.track) }),
        el('div', { className: 'conf', textContent: Math.round(m.confidence * 100) + '%' }),
        el('div', { className: 'sub', textContent: trackBy(m.track) }),
        el('div', { className: 'sub' }, 'at ' + clock(m.matchOffset) + ' of ' + length(m.track.duration) + ' · ',
          el('a', { href: link, textContent: 'show on the timeline' }))));
    }
    out.firstChild.id = 'file-match';
    out.firstChild.dataset.trackId = String(report.matches[0].track.id);
    location.hash = links[0];   // the best match's timeline, its matched stretch highlighted
  } catch (e) {
    out.replaceChildren(el('div', { className: 'error', textContent: file.name + ': ' + e.message }));
  }
}

$('file').addEventListener('change', () => { if ($('file').files.length) identify($('file').files[0]); });
const drop = $('drop');
drop.addEventListener('dragover', (e) => { e.preventDefault(); drop.classList.add('over'); });
drop.addEventListener('dragleave', () => drop.classList.remove('over'));
drop.addEventListener('drop', (e) => {
  e.preventDefault();
  drop.classList.remove('over');
  if (e.dataTransfer.files.length) identify(e.dataTransfer.files[0]);
});

// MARK: Listen

const RATE = 16000;
const live = { socket: null, context: null, media: null, match: null, matchAt: 0, classify: true, stopping: false };

function status(text, isError) {
  $('listen-status').textContent = text;
  $('listen-status').className = isError ? 'hint error' : 'hint';
}

function showMatch(event) {
  live.match = event;
  live.matchAt = performance.now();
  $('now').hidden = false;
  $('now').dataset.trackId = String(event.track.id);
  $('now-title').replaceChildren(el('a', { href: trackLink(event.track.id), textContent: trackName(event.track),
    title: 'Show this track and its timeline' }));
  $('now-artist').textContent = trackBy(event.track);
  $('now-duration').textContent = length(event.track.duration);
  const pct = Math.round(event.confidence * 100);
  $('now-confidence').textContent = pct + '%';
  $('now-confidence-bar').style.width = pct + '%';
  status('Matched at ' + clock(event.time) + ' of listening.');
  markCurrent(event.track.id);
}

// The position moves with the clock between events: predictedCurrentMatchOffset is where the track was when
// the event was sent, and it plays on at timeScale.
function tick() {
  const m = live.match;
  const position = m ? m.predictedCurrentMatchOffset + (m.timeScale || 1) * (performance.now() - live.matchAt) / 1000 : null;
  if (m) {
    $('now-position').textContent = clock(position);
    $('now-bar').style.width = Math.min(100, 100 * position / Math.max(1, m.track.duration)) + '%';
  }
  playhead(m && !$('track-card').hidden && shown.id === m.track.id ? position : null);
  requestAnimationFrame(tick);
}
requestAnimationFrame(tick);

// A line on the shown track's timeline where the track being heard is now, labelled (null: none).
function playhead(seconds) {
  const svg = document.querySelector('#track-timeline svg');
  let mark = document.getElementById('playhead');
  if (!svg || seconds === null) {
    if (mark) mark.remove();
    return;
  }
  const x0 = parseFloat(svg.getAttribute('data-plot-x')), w = parseFloat(svg.getAttribute('data-plot-width'));
  const duration = parseFloat(svg.getAttribute('data-duration'));
  const axis = svg.querySelector('g.axis line:last-of-type');
  if (!(duration > 0) || !axis) return;
  const ns = 'http://www.w3.org/2000/svg';
  if (!mark) {
    mark = document.createElementNS(ns, 'g');
    mark.id = 'playhead';
    const top = parseFloat(svg.getAttribute('data-heading-height')) || 0;
    const line = document.createElementNS(ns, 'line');
    for (const [k, v] of [['stroke', '#3451d1'], ['stroke-width', '2'], ['y1', String(top + 13)], ['y2', axis.getAttribute('y1')]]) {
      line.setAttribute(k, v);
    }
    const label = document.createElementNS(ns, 'text');
    for (const [k, v] of [['y', String(top + 10)], ['font-size', '12'], ['font-weight', '600'], ['fill', '#3451d1']]) {
      label.setAttribute(k, v);
    }
    mark.append(line, label);
    svg.append(mark);
  }
  const x = x0 + Math.min(Math.max(seconds, 0), duration) / duration * w;
  const [line, label] = mark.children;
  line.setAttribute('x1', String(x));
  line.setAttribute('x2', String(x));
  label.textContent = 'heard now ' + clock(seconds);
  label.setAttribute('x', String(x));
  label.setAttribute('text-anchor', x > x0 + w - 80 ? 'end' : x < x0 + 80 ? 'start' : 'middle');
}

function showSounds(event) {
  const box = $('sounds');
  box.replaceChildren(...event.labels.map((l) =>
    el('span', { className: 'chip' }, el('b', { textContent: l.label }), ' ' + Math.round(l.confidence * 100) + '%')));
}

function onEvent(event) {
  switch (event.event) {
    case 'match': showMatch(event); break;
    case 'noMatch':
      live.match = null;
      $('now').hidden = true;
      markCurrent(null);
      status(event.previousTrack ? 'The track stopped matching; listening…' : 'No match yet; listening…');
      break;
    case 'sound': showSounds(event); break;
    case 'dropped': status('The server fell behind and skipped ' + event.seconds.toFixed(1) + ' s.'); break;
    case 'error':
      if (event.code === 'model_unavailable' && live.classify) {
        live.classify = false;   // no sound model on the server: listen without sound classes
        live.retry = true;
      } else {
        status(event.message, true);
      }
      break;
    case 'end': if (!live.stopping) status('Listening ended (' + event.reason + ').'); break;
  }
}

async function startListening() {
  const button = $('listen');
  button.disabled = true;
  try {
    if (!live.media) {
      if (!navigator.mediaDevices || !window.AudioWorkletNode) {
        throw new Error('this browser gives the microphone only to pages on https:// or localhost');
      }
      live.media = await navigator.mediaDevices.getUserMedia({
        audio: { echoCancellation: false, noiseSuppression: false, autoGainControl: false },
      });
      live.context = new AudioContext();
      await live.context.audioWorklet.addModule('/assets/listen-worklet.js');
      const source = live.context.createMediaStreamSource(live.media);
      live.node = new AudioWorkletNode(live.context, 'earmark-downsampler', { processorOptions: { targetRate: RATE } });
      const mute = live.context.createGain();
      mute.gain.value = 0;
      source.connect(live.node).connect(mute).connect(live.context.destination);
      live.node.port.onmessage = (e) => {
        if (live.socket && live.socket.readyState === WebSocket.OPEN && live.started) live.socket.send(e.data);
      };
    }
    await live.context.resume();
    openSocket();
    button.textContent = 'Stop';
    button.classList.add('live');
    status('Listening…');
  } catch (e) {
    status('Cannot listen: ' + e.message, true);
    stopListening();
  } finally {
    button.disabled = false;
  }
}

function openSocket() {
  // A browser cannot set a WebSocket's headers: the token goes as access_token.
  const url = (location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host + '/v1/listen' +
    (token() ? '?access_token=' + encodeURIComponent(token()) : '');
  const socket = new WebSocket(url);
  socket.binaryType = 'arraybuffer';
  live.socket = socket;
  live.started = false;
  live.retry = false;
  socket.onopen = () => {
    socket.send(JSON.stringify({ format: 'f32le', sampleRate: RATE, channels: 1, classify: live.classify }));
    live.started = true;
  };
  socket.onmessage = (e) => { if (typeof e.data === 'string') onEvent(JSON.parse(e.data)); };
  socket.onclose = (e) => {
    if (live.socket !== socket) return;
    live.socket = null;
    if (live.retry && !live.stopping) { openSocket(); return; }
    if (!live.stopping) {
      if (e.code === 1013 || e.code === 1001) status(e.code === 1013 ? 'The server is busy; try again shortly.' : 'The server is shutting down.', true);
      else if (!live.started) status('The server refused the stream: busy, or it needs an access token (top right).', true);
      else if (e.code !== 1000 && !$('listen-status').classList.contains('error')) status('The connection closed (' + e.code + ').', true);
      stopListening(true);
    }
  };
}

function stopListening(keepStatus) {
  live.stopping = true;
  if (live.socket) {
    try { live.socket.send(JSON.stringify({ end: true })); } catch (e) { /* closed */ }
    live.socket.close(1000);
    live.socket = null;
  }
  if (live.context) live.context.suspend();
  const button = $('listen');
  button.textContent = 'Listen';
  button.classList.remove('live');
  if (!keepStatus) status('Stopped.');
  live.stopping = false;
}

$('listen').addEventListener('click', () => { if (live.socket) stopListening(); else startListening(); });

$('token').value = token();
$('token').addEventListener('change', () => {
  const value = $('token').value.trim();
  if (value) sessionStorage.setItem(tokenKey, value); else sessionStorage.removeItem(tokenKey);
  loadStats();
  loadTracks(false);
});

loadStats();
loadTracks(false);
route();
