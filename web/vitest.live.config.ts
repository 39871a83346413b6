import { defineConfig } from 'vitest/config';

// The live tests need a running chatd (CHATD_LIVE_URL, CHATD_LIVE_TOKEN):
// cmd/browsertest's TestClientLive starts the four services and runs them.
export default defineConfig({
  test: {
    include: ['packages/*/test/**/*.live.test.{ts,tsx}'],
    environment: 'node',
    testTimeout: 120000,
  },
});
