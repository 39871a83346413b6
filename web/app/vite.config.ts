import { defineConfig } from 'vite';
import react from '@vitejs/plugin-react';
import { fileURLToPath } from 'node:url';

// The build goes straight into pkg/webui/static, which the Go binaries
// embed: fixed file names (no content hashes; webui.go serves ETags and
// no-cache instead) keep the committed output reproducible and diffable.
export default defineConfig({
  plugins: [react()],
  base: '/',
  build: {
    outDir: fileURLToPath(new URL('../../pkg/webui/static', import.meta.url)),
    emptyOutDir: true,
    sourcemap: false,
    chunkSizeWarningLimit: 1024,
    modulePreload: { polyfill: false },
    rollupOptions: {
      output: {
        entryFileNames: 'assets/app.js',
        chunkFileNames: 'assets/[name].js',
        assetFileNames: 'assets/[name][extname]',
      },
    },
  },
  server: {
    proxy: { '/api': { target: process.env.CHATD_URL || 'http://127.0.0.1:8080', changeOrigin: false } },
  },
});
