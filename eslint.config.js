// The page's scripts (ui/static, loaded by ui/scripts.py), each checked as the page runs it:
// eslint's recommended rules and no-undef, with the globals each kind of script has.
const fs = require("node:fs");
const path = require("node:path");
const js = require("@eslint/js");
const globals = require("globals");

const STATIC = "ui/static";
const KINDS = {
  // whole scripts, in <script> elements of the page's <head>
  head: ["keyboard.js", "branch_why.js", "working.js"],
  // gr.HTML js_on_load: function bodies gradio runs with these arguments
  onLoad: ["click_token.js", "select_node.js", "import.js", "heatmap.js", "futures.js"],
  // an event's js=: one expression whose value is the function (history_sync.js: an object of them)
  expression: ["why_branch.js", "download.js", "caret.js", "place_caret.js", "history_sync.js", "answer.js", "fold_on_phone.js"],
};
const ON_LOAD_ARGUMENTS = Object.fromEntries(
  ["element", "trigger", "props", "server", "upload", "watch"].map((name) => [name, "readonly"]),
);

const listed = Object.values(KINDS).flat();
const unlisted = fs.readdirSync(path.join(__dirname, STATIC))
  .filter((name) => name.endsWith(".js") && !listed.includes(name));
if (unlisted.length) throw new Error(`eslint.config.js: say how the page runs ${unlisted.join(", ")}`);

const files = (names) => names.map((name) => `${STATIC}/${name}`);
const script = {sourceType: "script", ecmaVersion: "latest", globals: globals.browser};

module.exports = [
  {...js.configs.recommended, files: [`${STATIC}/**/*.js`]},
  {files: [`${STATIC}/**/*.js`], rules: {"no-undef": "error"}},
  {files: files(KINDS.head), languageOptions: script},
  {files: files(KINDS.expression), languageOptions: script},
  {
    files: files(KINDS.onLoad),
    languageOptions: {
      ...script,
      globals: {...globals.browser, ...ON_LOAD_ARGUMENTS},
      parserOptions: {ecmaFeatures: {globalReturn: true}},
    },
  },
];
