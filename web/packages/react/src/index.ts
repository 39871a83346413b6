export * from './controller';
export * from './useChat';
