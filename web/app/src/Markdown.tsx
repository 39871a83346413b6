// Markdown for message text: GFM (tables, task lists, strikethrough,
// autolinks), raw HTML never rendered and the tree sanitized
// (rehype-sanitize's GitHub schema), then code highlighted. Links open in
// a new tab without a referrer.
import { memo, useState, type ReactNode } from 'react';
import ReactMarkdown, { type Components } from 'react-markdown';
import remarkGfm from 'remark-gfm';
import rehypeSanitize, { defaultSchema } from 'rehype-sanitize';
import rehypeHighlight from 'rehype-highlight';

const schema = {
  ...defaultSchema,
  attributes: { ...defaultSchema.attributes, code: [...(defaultSchema.attributes?.code ?? []), ['className', /^language-./]] },
};

function textOfNode(n: ReactNode): string {
  if (typeof n === 'string' || typeof n === 'number') return String(n);
  if (Array.isArray(n)) return n.map(textOfNode).join('');
  if (n && typeof n === 'object' && 'props' in n) return textOfNode((n as { props: { children?: ReactNode } }).props.children);
  return '';
}

export function CopyButton({ text, label = 'Copy code' }: { text: string; label?: string }) {
  const [done, setDone] = useState<'' | 'ok' | 'fail'>('');
  const copy = async () => {
    try {
      await navigator.clipboard.writeText(text);
      setDone('ok');
    } catch {
      setDone('fail');
    }
    setTimeout(() => setDone(''), 1500);
  };
  return (
    <button type="button" className="copy" data-testid="copy-button" aria-label={label} onClick={copy}>
      {done === 'ok' ? 'Copied' : done === 'fail' ? 'Copy failed' : 'Copy'}
    </button>
  );
}

const components: Components = {
  pre({ children }) {
    const code = textOfNode(children).replace(/\n$/, '');
    const lang = /language-(\S+)/.exec(
      ((Array.isArray(children) ? children[0] : children) as { props?: { className?: string } })?.props?.className ?? '',
    )?.[1];
    return (
      <div className="codeblock" data-testid="code-block">
        <div className="codebar">
          <span>{lang ?? 'code'}</span>
          <CopyButton text={code} />
        </div>
        <pre>{children}</pre>
      </div>
    );
  },
  a({ children, href }) {
    return <a href={href} target="_blank" rel="noopener noreferrer nofollow">{children}</a>;
  },
  table({ children }) {
    return <div className="tablewrap"><table>{children}</table></div>;
  },
};

export const Markdown = memo(function Markdown({ text }: { text: string }) {
  return (
    <ReactMarkdown remarkPlugins={[remarkGfm]} rehypePlugins={[[rehypeSanitize, schema], [rehypeHighlight, { detect: false, ignoreMissing: true }]]} components={components}>
      {text}
    </ReactMarkdown>
  );
});
