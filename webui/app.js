// kvstash web page: chat through the server's own OpenAI-compatible API (no other network use).
// Conversations are branches kept in this browser (localStorage); forking copies a branch up to a
// message, and the server's prefix cache makes the shared start free (shown per turn as reused vs
// computed prompt tokens). Named states live on the server (/v1/states); the messages a state was made
// from are remembered here under its name, so switching to it shows the conversation and continues it.
'use strict';

const STORE = 'kvstash.webui.v1';
const STATE_MESSAGES = 'kvstash.webui.state.'; // + name: the messages a named state was saved from
const $ = (id) => document.getElementById(id);

let db = loadStore();
// The sampler settings' fields and the request keys they fill (an empty field is left out: the server's default).
const SAMPLER_FIELDS = [['top-k', 'top_k'], ['top-p', 'top_p'], ['min-p', 'min_p'], ['repeat-penalty', 'repeat_penalty'],
                        ['presence-penalty', 'presence_penalty'], ['frequency-penalty', 'frequency_penalty'],
                        ['seed', 'seed']];
let busy = null; // the AbortController of the request in flight
// A server of several models (docs/models.md): the one this page talks to, sent as ?model=NAME on every
// request (the server reads it where a body names no model); null with one model (requests as ever).
let chosenModel = null;
const MODEL_KEY = 'kvstash.webui.model';

function loadStore() {
  try {
    const saved = JSON.parse(localStorage.getItem(STORE));
    if (saved && Array.isArray(saved.branches)) return saved;
  } catch (e) { /* a corrupt store starts afresh */ }
  return { branches: [], current: null, next: 1 };
}
function persist() { localStorage.setItem(STORE, JSON.stringify(db)); }
function currentBranch() { return db.branches.find((b) => b.id === db.current); }

// A branch: { id, title, messages: [{role, content, usage?, error?}], state: name|null, stateMessages,
// raw }. `state` is sent with each request while the branch still starts with the state's messages;
// `raw`: a state whose messages this browser does not know (uploaded), continued as plain text.
function newBranch(title, messages, extra) {
  const branch = Object.assign({ id: db.next++, title, messages, state: null, stateMessages: 0, raw: false }, extra);
  db.branches.push(branch);
  db.current = branch.id;
  persist();
  render();
  return branch;
}

function headers(json) {
  const h = {};
  if (json) h['Content-Type'] = 'application/json';
  const key = $('api-key').value.trim();
  if (key) h.Authorization = 'Bearer ' + key;
  return h;
}

// fetch, throwing the server's error message (its JSON error object) for a non-2xx answer.
async function api(method, path, body, options) {
  if (chosenModel && !path.startsWith('/v1/models')) {
    path += (path.includes('?') ? '&' : '?') + 'model=' + encodeURIComponent(chosenModel);
  }
  const init = Object.assign({ method, headers: headers(typeof body === 'string') }, options || {});
  if (body !== undefined) init.body = body;
  const res = await fetch(path, init);
  if (!res.ok) {
    let message = 'HTTP ' + res.status;
    let code = null;
    try {
      const body = (await res.json()).error;
      message = body.message || message;
      code = body.code;
    } catch (e) { /* not JSON */ }
    const error = new Error(message);
    error.status = res.status;
    error.code = code;
    throw error;
  }
  return res;
}

function setStatus(text, isError) {
  $('status').textContent = text;
  $('status').classList.toggle('error', !!isError);
}

function el(tag, props, children) {
  const node = document.createElement(tag);
  Object.assign(node, props || {});
  for (const child of children || []) node.append(child);
  return node;
}

// "prompt 41 tokens: 30 reused · 11 computed · 16 generated · 0.8 s · 21.3 tokens/s"
function usageNode(usage) {
  const reused = usage.cached_tokens;
  const computed = usage.prompt_tokens - reused;
  return el('div', { className: 'usage' }, [
    'prompt ' + usage.prompt_tokens + ' tokens: ',
    el('b', { className: 'reused', textContent: String(reused) }), ' reused · ',
    el('b', { className: 'computed', textContent: String(computed) }), ' computed · ',
    el('span', { className: 'generated', textContent: String(usage.completion_tokens) }), ' generated',
    usage.seconds !== undefined ? ' · ' + usage.seconds.toFixed(1) + ' s' : '',
    usage.tokens_per_second !== undefined
      ? el('span', { className: 'speed', textContent: ' · ' + usage.tokens_per_second.toFixed(1) + ' tokens/s' }) : '',
  ]);
}

// An answer's text as Markdown (markdown.js builds DOM nodes, never HTML from the model).
function textNode(message) {
  if (message.role === 'assistant' && message.content) {
    const node = el('div', { className: 'text md' });
    node.append(markdown.render(message.content));
    return node;
  }
  return el('div', { className: 'text',
                     textContent: message.content || (message.pending ? '…' : message.error ? '' : '(no text)') });
}

function actionButton(label, className, title, aria, action) {
  const b = el('button', { type: 'button', className, textContent: label, title });
  b.setAttribute('aria-label', aria);
  b.addEventListener('click', action);
  return b;
}

// Edit a user message in place: saving forks the conversation there with the new text and answers it.
function startEdit(branch, index, node) {
  if (busy) return;
  const box = el('textarea', { className: 'edit-box', value: branch.messages[index].content, rows: 3 });
  box.setAttribute('aria-label', 'New text of message ' + (index + 1));
  const save = actionButton('Send edit', 'send-edit', 'Fork the conversation here with this text and answer it',
                            'Send the edited message ' + (index + 1), () => editAt(branch, index, box.value));
  const cancel = actionButton('Cancel', 'cancel-edit', 'Keep the message', 'Cancel the edit', () => render());
  node.querySelector('.text').replaceWith(el('div', { className: 'edit' }, [box, el('div', { className: 'row' },
                                                                                     [save, cancel])]));
  box.focus();
}

function messageNode(branch, message, index) {
  const fork = actionButton('Fork here', 'fork', 'A new branch with the messages up to this one',
                            'Fork the conversation at message ' + (index + 1), () => forkAt(branch, index));
  const actions = [fork];
  if (message.role === 'user' && !branch.raw) {
    actions.unshift(actionButton('Edit', 'edit', 'Change this message: a new branch from here',
                                 'Edit message ' + (index + 1), () => startEdit(branch, index, node)));
  }
  if (message.role === 'assistant' && !message.pending && index > 0) {
    actions.unshift(actionButton('Regenerate', 'regenerate', 'Answer the previous message again in a new branch',
                                 'Regenerate answer ' + (index + 1), () => regenerateAt(branch, index)));
  }
  const node = el('li', { className: 'msg ' + message.role + (message.error ? ' error' : '') +
                                     (message.pending ? ' pending' : '') }, [
    el('div', { className: 'head' }, [el('span', { className: 'role', textContent: message.role }),
                                      el('span', { className: 'actions' }, actions)]),
    textNode(message),
  ]);
  if (message.error) node.append(el('div', { className: 'text', textContent: 'Error: ' + message.error }));
  if (message.usage) node.append(usageNode(message.usage));
  return node;
}

function render() {
  const branch = currentBranch();
  const list = $('branches');
  list.replaceChildren();
  for (const b of db.branches) {
    const open = el('button', { type: 'button', className: 'name', textContent: b.title });
    open.setAttribute('aria-current', b.id === db.current ? 'true' : 'false');
    open.addEventListener('click', () => { db.current = b.id; persist(); render(); $('input').focus(); });
    const remove = el('button', { type: 'button', textContent: '✕', title: 'Delete this branch' });
    remove.setAttribute('aria-label', 'Delete branch ' + b.title);
    remove.addEventListener('click', () => deleteBranch(b));
    list.append(el('li', { className: b.id === db.current ? 'current' : '' }, [open, remove,
      el('span', { className: 'meta', textContent: b.messages.length + ' messages' +
                                                   (b.state ? ' · from state ' + b.state : '') })]));
  }
  const messages = $('messages');
  messages.replaceChildren();
  if (!branch) {
    $('branch-title').textContent = 'New conversation';
    return;
  }
  $('branch-title').textContent = branch.title + (branch.raw
    ? ' — this browser does not know the messages of state ' + branch.state + ': what you type continues its text'
    : '');
  branch.messages.forEach((m, i) => messages.append(messageNode(branch, m, i)));
  messages.scrollTop = messages.scrollHeight;
}

function deleteBranch(branch) {
  db.branches = db.branches.filter((b) => b !== branch);
  if (db.current === branch.id) db.current = db.branches.length ? db.branches[db.branches.length - 1].id : null;
  persist();
  render();
}

// A new branch with `messages` (the start of `branch`'s, maybe changed at the end): it keeps the branch's
// named state while it still starts with the state's messages.
function forkWith(branch, messages, label) {
  const keepState = branch.state && messages.length >= branch.stateMessages;
  return newBranch(branch.title.replace(/ · (fork|edit|regenerate).*$/, '') + ' · ' + label, messages,
                   keepState ? { state: branch.state, stateMessages: branch.stateMessages, raw: branch.raw } : {});
}

function plainMessages(branch, end) {
  return branch.messages.slice(0, end).filter((m) => !m.error).map((m) => ({ role: m.role, content: m.content }));
}

// Regenerate answer `index`: a fork that ends with the message it answered, answered again.
function regenerateAt(branch, index) {
  if (busy) return;
  forkWith(branch, plainMessages(branch, index), 'regenerate #' + (index + 1));
  send(true);
}

function editAt(branch, index, text) {
  if (busy || text.trim() === '') return;
  const messages = plainMessages(branch, index);
  messages.push({ role: 'user', content: text });
  forkWith(branch, messages, 'edit at #' + (index + 1));
  send(true);
}

function forkAt(branch, index) {
  if (busy) return;
  const messages = plainMessages(branch, index + 1);
  forkWith(branch, messages, 'fork at #' + (index + 1));
  setStatus(messages.length && messages[messages.length - 1].role === 'user'
    ? 'Forked: Send with an empty box answers the last message again, or type a new one.'
    : 'Forked: the shared start is reused from the prefix cache.');
  $('input').focus();
}

function requestMessages(branch) {
  return branch.messages.filter((m) => !m.error && !m.pending).map((m) => ({ role: m.role, content: m.content }));
}

// Reads an SSE stream of OpenAI chunks; calls onChunk(object) per "data:" event until [DONE].
async function readEvents(res, onChunk) {
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      for (const line of event.split('\n')) {
        if (!line.startsWith('data:')) continue;
        const data = line.slice(5).trim();
        if (data === '[DONE]') return;
        onChunk(JSON.parse(data));
      }
    }
  }
}

// Sends the composer's text as the next message, or with answerOnly (regenerate, edit) answers the branch's
// last message as it is.
async function send(answerOnly) {
  if (busy) return;
  const text = answerOnly ? '' : $('input').value;
  let branch = currentBranch() || newBranch('Chat ' + db.next, []);
  // A new chat starts with the system prompt of the settings (a message of the branch: forks and saved
  // states carry it).
  const system = $('system-prompt').value.trim();
  if (system && branch.messages.length === 0 && !branch.raw && text.trim() !== '') {
    branch.messages.push({ role: 'system', content: system });
  }
  const last = branch.messages[branch.messages.length - 1];
  if (text.trim() === '' && !(last && last.role === 'user' && !branch.raw)) return;
  if (text.trim() !== '') {
    branch.messages.push({ role: 'user', content: text });
    if (branch.title.startsWith('Chat ') && branch.messages.filter((m) => m.role === 'user').length === 1) {
      branch.title = text.slice(0, 40);
    }
  }
  if (!answerOnly) $('input').value = '';
  const reply = { role: 'assistant', content: '', pending: true };
  branch.messages.push(reply);
  persist();
  render();

  const body = {
    stream: true,
    stream_options: { include_usage: true },
    max_tokens: Number($('max-tokens').value) || 256,
    temperature: Number($('temperature').value),
  };
  for (const [id, key] of SAMPLER_FIELDS) {
    const value = $(id).value.trim();
    if (value !== '' && !Number.isNaN(Number(value))) body[key] = Number(value);
  }
  // Raw: the state's text, then this branch's turns as plain text (what was typed and what came back).
  if (branch.raw) body.prompt = requestMessages(branch).map((m) => m.content).join('');
  else body.messages = requestMessages(branch);
  const post = () => {
    if (branch.state) body.state = branch.state; else delete body.state;
    return api('POST', branch.raw ? '/v1/completions' : '/v1/chat/completions', JSON.stringify(body),
               { signal: busy.signal });
  };
  busy = new AbortController();
  $('send').hidden = true;
  $('stop').hidden = false;
  setStatus('Generating…');
  const started = performance.now();
  let firstPiece = null;
  try {
    let res;
    try {
      res = await post();
    } catch (e) {
      // The state is gone (deleted, or a server without --state-dir restarted) or was replaced by another
      // conversation: the messages are all here, so send them without it (the prefix cache still helps).
      if (branch.raw || !branch.state || !['state_not_found', 'state_mismatch'].includes(e.code)) throw e;
      setStatus('State ' + branch.state + ' cannot be used (' + e.message + '); sending the messages without it.');
      branch.state = null;
      res = await post();
    }
    await readEvents(res, (chunk) => {
      if (chunk.error) throw new Error(chunk.error.message);
      const choice = chunk.choices && chunk.choices[0];
      const piece = choice ? (choice.delta ? choice.delta.content : choice.text) : '';
      if (piece) {
        if (firstPiece === null) firstPiece = performance.now();
        reply.content += piece;
        // Looked up each time: switching branches while this one streams re-renders the list.
        const shown = branch.id === db.current && document.querySelector('#messages .msg.pending .text');
        if (shown) shown.replaceWith(textNode(reply));
        $('messages').scrollTop = $('messages').scrollHeight;
      }
      if (chunk.usage) {
        reply.usage = { prompt_tokens: chunk.usage.prompt_tokens, completion_tokens: chunk.usage.completion_tokens,
                        cached_tokens: (chunk.usage.prompt_tokens_details || {}).cached_tokens || 0 };
      }
    });
    if (reply.usage) {
      const ended = performance.now();
      reply.usage.seconds = (ended - started) / 1000;
      // Decode speed: the tokens after the first over the time since the first arrived.
      if (firstPiece !== null && ended > firstPiece && reply.usage.completion_tokens > 1) {
        reply.usage.tokens_per_second = (reply.usage.completion_tokens - 1) / ((ended - firstPiece) / 1000);
      }
    }
    if ($('status').textContent === 'Generating…') setStatus('');
  } catch (e) {
    if (e.name === 'AbortError') {
      setStatus('Stopped.');
    } else {
      reply.error = e.message;
      setStatus(e.message, true);
    }
  } finally {
    delete reply.pending;
    busy = null;
    $('send').hidden = false;
    $('stop').hidden = true;
    persist();
    render();
  }
}

// ---- named states (server side) ----

function sizeText(bytes) {
  if (bytes < 1024) return bytes + ' B';
  if (bytes < 1048576) return (bytes / 1024).toFixed(1) + ' KiB';
  return (bytes / 1048576).toFixed(1) + ' MiB';
}

async function refreshStates() {
  let states = [];
  try {
    states = (await (await api('GET', '/v1/states')).json()).data;
  } catch (e) {
    setStatus('Cannot list states: ' + e.message, true);
    return;
  }
  const list = $('states');
  list.replaceChildren();
  for (const s of states) {
    const known = localStorage.getItem(STATE_MESSAGES + s.name) !== null;
    const button = (label, title, action) => {
      const b = el('button', { type: 'button', textContent: label, title });
      b.setAttribute('aria-label', label + ' state ' + s.name);
      b.addEventListener('click', action);
      return b;
    };
    list.append(el('li', { className: 'state', id: 'state-' + s.name }, [
      el('span', { className: 'name', textContent: s.name }),
      button('Open', 'Continue from this state in a new branch', () => openState(s.name)),
      button('Download', 'Download the state file (.kvs)', () => downloadState(s.name)),
      button('Delete', 'Delete this state on the server', () => deleteState(s.name)),
      el('span', { className: 'meta', textContent: s.tokens + ' tokens · ' + sizeText(s.file_bytes || s.bytes) +
                                                   (known ? '' : ' · messages not known here') }),
    ]));
  }
}

async function saveState(name) {
  const branch = currentBranch();
  const messages = branch ? requestMessages(branch) : [];
  if (branch && branch.raw) {
    setStatus('This branch continues the text of state ' + branch.state + ', whose messages this browser does ' +
              'not know: it cannot be saved as messages.', true);
    return;
  }
  if (!messages.length) {
    setStatus('Nothing to save: this branch has no messages yet.', true);
    return;
  }
  const save = (replace) => api('POST', '/v1/states', JSON.stringify({ name, messages, replace }));
  setStatus('Saving ' + name + '…');
  let res;
  try {
    try {
      res = await save(false);
    } catch (e) {
      if (e.status !== 409 || !confirm('A state named ' + name + ' exists. Replace it?')) throw e;
      res = await save(true);
    }
  } catch (e) {
    setStatus('Save failed: ' + e.message, true);
    return;
  }
  const info = await res.json();
  localStorage.setItem(STATE_MESSAGES + name, JSON.stringify(messages));
  const cached = info.usage ? info.usage.prompt_tokens_details.cached_tokens : 0;
  setStatus('Saved ' + name + ': ' + info.tokens + ' tokens (' + cached + ' reused from the prefix cache).');
  await refreshStates();
}

function openState(name) {
  if (busy) return;
  const known = localStorage.getItem(STATE_MESSAGES + name);
  const messages = known ? JSON.parse(known) : [];
  newBranch('state ' + name, messages, { state: name, stateMessages: messages.length, raw: !known });
  setStatus('Switched to state ' + name + ': its tokens are not computed again.');
  $('input').focus();
}

async function downloadState(name) {
  try {
    const blob = await (await api('GET', '/v1/states/' + encodeURIComponent(name) + '/file')).blob();
    const url = URL.createObjectURL(blob);
    const a = el('a', { href: url, download: name + '.kvs' });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  } catch (e) {
    setStatus('Download failed: ' + e.message, true);
  }
}

async function deleteState(name) {
  if (!confirm('Delete state ' + name + ' on the server?')) return;
  try {
    await api('DELETE', '/v1/states/' + encodeURIComponent(name));
    localStorage.removeItem(STATE_MESSAGES + name);
    setStatus('Deleted ' + name + '.');
  } catch (e) {
    setStatus('Delete failed: ' + e.message, true);
  }
  await refreshStates();
}

async function uploadState(file, name) {
  setStatus('Uploading ' + file.name + ' as ' + name + '…');
  try {
    await api('PUT', '/v1/states/' + encodeURIComponent(name) + '/file', file,
              { headers: Object.assign(headers(false), { 'Content-Type': 'application/octet-stream' }) });
    setStatus('Uploaded ' + name + '.');
  } catch (e) {
    setStatus('Upload failed: ' + e.message, true);
  }
  await refreshStates();
}

// ---- wiring ----

function init() {
  $('api-key').value = localStorage.getItem('kvstash.webui.apikey') || '';
  $('api-key').addEventListener('change', () => {
    localStorage.setItem('kvstash.webui.apikey', $('api-key').value.trim());
    refreshStates();
    loadModel();
  });
  // The settings survive a reload.
  const SETTINGS = 'kvstash.webui.settings';
  const settings = JSON.parse(localStorage.getItem(SETTINGS) || '{}');
  for (const id of ['max-tokens', 'temperature', 'system-prompt', ...SAMPLER_FIELDS.map(([field]) => field)]) {
    if (settings[id] !== undefined) $(id).value = settings[id];
    $(id).addEventListener('change', () => {
      settings[id] = $(id).value;
      localStorage.setItem(SETTINGS, JSON.stringify(settings));
    });
  }
  $('composer').addEventListener('submit', (e) => { e.preventDefault(); send(false); });
  $('input').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); send(false); }
  });
  $('stop').addEventListener('click', () => busy && busy.abort());
  $('new-chat').addEventListener('click', () => { if (!busy) { newBranch('Chat ' + db.next, []); $('input').focus(); } });
  $('save-form').addEventListener('submit', (e) => { e.preventDefault(); saveState($('save-name').value.trim()); });
  $('upload-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const file = $('upload-file').files[0];
    if (file) uploadState(file, $('upload-name').value.trim()); else setStatus('Choose a state file first.', true);
  });
  $('toggle-side').addEventListener('click', () => {
    const open = $('side').classList.toggle('open');
    $('toggle-side').setAttribute('aria-expanded', String(open));
  });
  // A reply cut off by a reload: keep what came, without the pending marker.
  for (const b of db.branches) for (const m of b.messages) if (m.pending) { delete m.pending; m.error = 'interrupted'; }
  render();
  refreshStates();
  loadModel();
}

async function loadModel() {
  try {
    const models = (await (await api('GET', '/v1/models')).json()).data;
    if (models.length === 1) {
      const model = models[0];
      $('model').textContent = model.id + ' · context ' + model.meta.n_ctx + ' tokens';
      return;
    }
    // Several: a picker; each model shown with its state (loaded, unloaded, failed). States are per model.
    const pick = $('model-pick');
    pick.replaceChildren(...models.map((m) => {
      const option = document.createElement('option');
      option.value = m.id;
      option.textContent = m.id + (m.status ? ' (' + m.status.value + ')' : '');
      return option;
    }));
    const saved = localStorage.getItem(MODEL_KEY);
    chosenModel = models.some((m) => m.id === saved) ? saved : models[0].id;
    pick.value = chosenModel;
    pick.hidden = false;
    $('model').textContent = models.length + ' models';
    pick.onchange = () => {
      chosenModel = pick.value;
      localStorage.setItem(MODEL_KEY, chosenModel);
      refreshStates();
    };
    refreshStates();
  } catch (e) {
    $('model').textContent = 'server not reachable: ' + e.message;
  }
}

init();
