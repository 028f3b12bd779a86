// A small Markdown renderer for the answers (no library, no network): fenced code blocks (with a Copy
// button), inline code, headings, bullet and numbered lists, block quotes, paragraphs, **bold**, *italic*,
// ~~strike~~ and [links](https://...). It builds DOM nodes with textContent only — never innerHTML — so
// whatever the model writes is shown as text and cannot run in the page. An unclosed fence (a reply
// still streaming) shows as a code block to the end.
'use strict';

const markdown = (() => {
  function node(tag, className, children) {
    const n = document.createElement(tag);
    if (className) n.className = className;
    for (const c of children || []) n.append(c);
    return n;
  }

  // Copies text to the clipboard: the Clipboard API where the page may use it, else a hidden textarea and
  // execCommand (plain-HTTP pages on other hosts than localhost). Resolves true on success.
  async function copyText(text) {
    try {
      if (navigator.clipboard && window.isSecureContext) {
        await navigator.clipboard.writeText(text);
        return true;
      }
    } catch (e) { /* permission refused: try the old way */ }
    const area = node('textarea');
    area.value = text;
    area.setAttribute('readonly', '');
    area.style.position = 'fixed';
    area.style.opacity = '0';
    document.body.append(area);
    area.select();
    let ok = false;
    try { ok = document.execCommand('copy'); } catch (e) { ok = false; }
    area.remove();
    return ok;
  }

  function codeBlock(code, language) {
    const copy = node('button', 'copy');
    copy.type = 'button';
    copy.textContent = 'Copy';
    copy.title = 'Copy the code';
    copy.setAttribute('aria-label', 'Copy the code' + (language ? ' (' + language + ')' : ''));
    copy.addEventListener('click', async () => {
      const ok = await copyText(code);
      copy.textContent = ok ? 'Copied' : 'Copy failed';
      setTimeout(() => { copy.textContent = 'Copy'; }, 1500);
    });
    const pre = node('pre', null, [node('code', language ? 'language-' + language : null, [code])]);
    pre.dataset.code = code;
    return node('div', 'code-block', [node('div', 'code-head', [node('span', 'lang', [language || 'code']), copy]), pre]);
  }

  // Inline spans: `code`, **bold**, *italic* / _italic_, ~~strike~~, [text](http(s) url). Returns nodes.
  const INLINE = /`([^`]+)`|\*\*([^*]+)\*\*|__([^_]+)__|\*([^*\s][^*]*)\*|_([^_\s][^_]*)_|~~([^~]+)~~|\[([^\]]+)\]\(([^)\s]+)\)/g;
  function inline(text) {
    const out = [];
    let last = 0;
    for (const m of text.matchAll(INLINE)) {
      if (m.index > last) out.push(text.slice(last, m.index));
      if (m[1] !== undefined) out.push(node('code', null, [m[1]]));
      else if (m[2] !== undefined || m[3] !== undefined) out.push(node('strong', null, inline(m[2] ?? m[3])));
      else if (m[4] !== undefined || m[5] !== undefined) out.push(node('em', null, inline(m[4] ?? m[5])));
      else if (m[6] !== undefined) out.push(node('del', null, inline(m[6])));
      else if (/^https?:\/\//i.test(m[8])) {
        const a = node('a', null, inline(m[7]));
        a.href = m[8];
        a.target = '_blank';
        a.rel = 'noopener noreferrer';
        out.push(a);
      } else {
        out.push(m[0]);  // another scheme (javascript:, data:): shown as text
      }
      last = m.index + m[0].length;
    }
    if (last < text.length) out.push(text.slice(last));
    return out;
  }

  // Lines joined into one paragraph's inline nodes, with a <br> where a line ended.
  function lines(texts) {
    const out = [];
    texts.forEach((t, i) => {
      if (i) out.push(node('br'));
      out.push(...inline(t));
    });
    return out;
  }

  const FENCE = /^\s*(```|~~~)\s*([\w+#.-]*)\s*$/;
  const HEADING = /^(#{1,6})\s+(.*)$/;
  const BULLET = /^\s*[-*+]\s+(.*)$/;
  const NUMBERED = /^\s*(\d{1,9})[.)]\s+(.*)$/;
  const QUOTE = /^\s*>\s?(.*)$/;
  const RULE = /^\s*([-*_])(\s*\1){2,}\s*$/;

  // Markdown text -> a DocumentFragment.
  function render(text) {
    const out = document.createDocumentFragment();
    const src = String(text).replace(/\r\n?/g, '\n').split('\n');
    let i = 0;
    while (i < src.length) {
      const line = src[i];
      const fence = line.match(FENCE);
      if (fence) {
        const body = [];
        i++;
        while (i < src.length && !(src[i].trim().startsWith(fence[1]) && src[i].trim().replace(/[`~]/g, '') === '')) {
          body.push(src[i++]);
        }
        i++;  // the closing fence (or the end)
        out.append(codeBlock(body.join('\n'), fence[2]));
        continue;
      }
      if (line.trim() === '') { i++; continue; }
      const heading = line.match(HEADING);
      if (heading) {
        out.append(node('h' + Math.min(heading[1].length + 2, 6), 'md-heading', inline(heading[2])));
        i++;
        continue;
      }
      if (RULE.test(line)) { out.append(node('hr')); i++; continue; }
      if (QUOTE.test(line)) {
        const quoted = [];
        while (i < src.length && QUOTE.test(src[i])) quoted.push(src[i++].match(QUOTE)[1]);
        out.append(node('blockquote', null, [render(quoted.join('\n'))]));
        continue;
      }
      const bullet = BULLET.test(line), numbered = NUMBERED.test(line);
      if (bullet || numbered) {
        const list = node(bullet ? 'ul' : 'ol');
        if (numbered) list.start = Number(line.match(NUMBERED)[1]);
        const pattern = bullet ? BULLET : NUMBERED;
        while (i < src.length && pattern.test(src[i])) {
          const m = src[i++].match(pattern);
          const item = [m[m.length - 1]];
          // Indented lines that are not a new item continue it.
          while (i < src.length && /^\s{2,}\S/.test(src[i]) && !pattern.test(src[i])) item.push(src[i++].trim());
          list.append(node('li', null, lines(item)));
        }
        out.append(list);
        continue;
      }
      const paragraph = [];
      while (i < src.length && src[i].trim() !== '' && !FENCE.test(src[i]) && !HEADING.test(src[i]) &&
             !BULLET.test(src[i]) && !NUMBERED.test(src[i]) && !QUOTE.test(src[i])) {
        paragraph.push(src[i++]);
      }
      out.append(node('p', null, lines(paragraph)));
    }
    return out;
  }

  return { render, copyText };
})();
