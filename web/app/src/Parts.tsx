import { useEffect, useState } from 'react';
import { runningFor, type ChatdClient, type LivePart, type MessagePart } from '@chatd/client';
import { Markdown } from './Markdown';
import { elapsed, pretty } from './format';

/** The current time, once a second while mounted. */
function useNow(): number {
  const [now, setNow] = useState(() => Date.now());
  useEffect(() => {
    const t = setInterval(() => setNow(Date.now()), 1000);
    return () => clearInterval(t);
  }, []);
  return now;
}

/** How long a running call has run, counting up. */
function Elapsed({ since }: { since?: string }) {
  const ms = runningFor(since, useNow());
  return <span className="elapsed" data-testid="tool-elapsed" data-ms={ms}>{elapsed(ms)}</span>;
}

/**
 * A tool call of the step being run (the live "tool-status" and
 * "tool-progress" parts): running with its elapsed time and progress, or how
 * it ended and after how long.
 */
export function ToolRun({ part }: { part: LivePart }) {
  const state = part.state ?? 'running';
  const progress = part.progress === undefined ? '' : part.total ? `${part.progress}/${part.total}` : `${part.progress}`;
  return (
    <div className={`tool run ${state}`} data-testid="tool-run" data-state={state} data-tool={part.tool_name}>
      <span className={`badge${state === 'failed' ? ' bad' : ''}`}>{state}</span> <code>{part.tool_name}</code>{' '}
      {state === 'running'
        ? <Elapsed since={part.started_at} />
        : part.duration_ms !== undefined && <span className="elapsed">after {elapsed(Number(part.duration_ms))}</span>}
      {(progress || part.message) && <span className="progress" data-testid="tool-progress"> {progress} {part.message}</span>}
    </div>
  );
}

/** An attachment fetched with the token (an <img src> cannot send it). */
export function Attachment({ client, part }: { client: ChatdClient; part: MessagePart }) {
  const [url, setUrl] = useState('');
  const [state, setState] = useState<'loading' | 'ok' | 'expired' | 'failed'>('loading');
  const image = (part.media_type ?? '').startsWith('image/');
  useEffect(() => {
    if (!part.file_id) return;
    let revoke = '';
    let live = true;
    client.downloadFile(part.file_id).then(
      (blob) => {
        if (!live) return;
        revoke = URL.createObjectURL(blob);
        setUrl(revoke);
        setState('ok');
      },
      (err) => live && setState(err?.status === 404 ? 'expired' : 'failed'),
    );
    return () => {
      live = false;
      if (revoke) URL.revokeObjectURL(revoke);
    };
  }, [client, part.file_id]);
  const name = part.name || 'attachment';
  if (state === 'expired' || state === 'failed') {
    return (
      <div className="file expired" data-testid="part-file" data-state={state}>
        <span className="badge">file</span> {name} <em>{state === 'expired' ? '(expired)' : '(could not load)'}</em>
      </div>
    );
  }
  if (image && url) {
    return (
      <figure className="file image" data-testid="part-file" data-state="ok">
        <a href={url} target="_blank" rel="noopener noreferrer"><img src={url} alt={name} /></a>
        <figcaption>{name}</figcaption>
      </figure>
    );
  }
  return (
    <div className="file" data-testid="part-file" data-state={state}>
      <span className="badge">file</span>{' '}
      {url ? <a href={url} download={name}>{name}</a> : name} <small>{part.media_type}</small>
    </div>
  );
}

export function Part({ part, client, live }: { part: LivePart; client: ChatdClient; live?: boolean }) {
  switch (part.type) {
    case 'text':
      return <div className="md" data-testid={live ? 'preview-text' : 'part-text'}><Markdown text={part.text ?? ''} /></div>;
    case 'reasoning':
      return (
        <details className="reasoning" data-testid="part-reasoning">
          <summary>{live ? 'Thinking…' : 'Reasoning'}</summary>
          <div className="md"><Markdown text={part.text ?? ''} /></div>
        </details>
      );
    case 'tool-call':
      return (
        <details className="tool call" data-testid="part-tool-call" open={live}>
          <summary>
            <span className="badge">tool</span> <code>{part.tool_name}</code>
            {part.policy_modified && <span className="badge policy" data-testid="policy-modified" title="A lifecycle hook rewrote this call's input">Modified by policy</span>}
            {part.state && <span className="badge" data-testid="tool-call-state" data-state={part.state}>{part.state}</span>}
            {part.state === 'running' && <> <Elapsed since={part.started_at} /></>}
          </summary>
          <div className="label">Arguments</div>
          <pre>{pretty(part.args)}</pre>
        </details>
      );
    case 'tool-result':
      return (
        <details className={`tool result${part.is_error ? ' error' : ''}`} data-testid="part-tool-result" data-error={part.is_error ? 'true' : 'false'} open>
          <summary>
            <span className={`badge${part.is_error ? ' bad' : ''}`}>{part.is_error ? 'tool error' : 'result'}</span> <code>{part.tool_name}</code>
          </summary>
          <pre>{pretty(part.result)}</pre>
        </details>
      );
    case 'file':
      return <Attachment client={client} part={part} />;
    case 'tool-status':
    case 'tool-progress':
      return <ToolRun part={part} />;
    case 'hook-notice':
      return <div className="notice" data-testid="part-hook-notice"><span className="badge">{part.hook || 'hook'}</span> {part.text}</div>;
    default:
      return <div className="notice">[{part.type}]</div>;
  }
}
