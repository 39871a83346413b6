export * from './types';
export * from './errors';
export * from './rest';
export * from './sse';
export * from './stream';
export * from './state';
