// Builds the console into dist/: one script, one stylesheet, one page, no hashes in the names
// (the broker serves them with `no-cache` and an ETag), so a rebuild changes only their bytes.
import { build } from "esbuild";
import { copyFileSync, mkdirSync } from "node:fs";

mkdirSync("dist", { recursive: true });
await build({
  entryPoints: ["src/main.tsx"],
  bundle: true,
  minify: true,
  format: "esm",
  target: "es2022",
  jsx: "automatic",
  jsxImportSource: "preact",
  outfile: "dist/app.js",
  legalComments: "none",
  // The bundled libraries' notices, which their MIT licenses ask copies to keep.
  banner: {
    js: "/*! Strata console. Bundles Preact (MIT License, Copyright (c) 2015-present Jason Miller) and uPlot (MIT License, Copyright (c) 2025 Leon Sorokin). */",
  },
  logLevel: "info",
});
await build({
  entryPoints: ["src/app.css"],
  bundle: true,
  minify: true,
  outfile: "dist/app.css",
  logLevel: "info",
});
copyFileSync("src/index.html", "dist/index.html");
copyFileSync("src/icon.svg", "dist/icon.svg");
