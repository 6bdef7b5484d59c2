// The colour theme, applied before the first paint (a classic script in <head>, so a reader who
// chose one never sees the other flash). "light" or "dark" as chosen with the theme button and kept
// in localStorage; nothing stored follows the system (prefers-color-scheme). js/app.js owns the button.
(function applyTheme() {
  let theme = null;
  try {
    theme = localStorage.getItem("convograph.theme");
  } catch {
    theme = null;
  }
  if (theme === "light" || theme === "dark") document.documentElement.dataset.theme = theme;
})();
