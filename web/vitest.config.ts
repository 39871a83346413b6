import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['packages/*/test/**/*.test.{ts,tsx}', 'app/test/**/*.test.{ts,tsx}'],
    exclude: ['**/node_modules/**', '**/*.live.test.*'],
    environment: 'node',
    testTimeout: 30000,
  },
});
