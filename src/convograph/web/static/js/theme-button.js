// The theme button of the top bar: the colour theme follows the system (prefers-color-scheme)
// until the reader picks one (Auto -> Dark -> Light), remembered on this device. js/theme.js, a
// classic script in <head>, applies the remembered choice before the first paint.

import { h } from "./util.js";

const THEME_KEY = "convograph.theme";
const THEMES = ["auto", "dark", "light"]; // the button cycles through them in this order

function currentTheme() {
  const chosen = document.documentElement.dataset.theme;
  return chosen === "light" || chosen === "dark" ? chosen : "auto";
}

/** Make `button` the theme switch (its label says the theme and what a click does). */
export function setupThemeButton(button) {
  const show = () => {
    const theme = currentTheme();
    const system = matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light";
    const label = theme === "auto" ? `Auto (${system})` : theme === "dark" ? "Dark" : "Light";
    const next = THEMES[(THEMES.indexOf(theme) + 1) % THEMES.length];
    button.replaceChildren(h("span", { "aria-hidden": "true" }, theme === "dark" ? "☾ " : theme === "light" ? "☀ " : "◐ "), h("span", { class: "wide-only" }, label));
    button.dataset.theme = theme;
    button.setAttribute("aria-label", `Colour theme: ${label}. Switch to ${next}.`);
    button.title = `Colour theme: ${label} (click for ${next})`;
  };
  button.addEventListener("click", () => {
    const next = THEMES[(THEMES.indexOf(currentTheme()) + 1) % THEMES.length];
    if (next === "auto") delete document.documentElement.dataset.theme;
    else document.documentElement.dataset.theme = next;
    try {
      if (next === "auto") localStorage.removeItem(THEME_KEY);
      else localStorage.setItem(THEME_KEY, next);
    } catch {
      /* not remembered: this page only */
    }
    show();
  });
  matchMedia("(prefers-color-scheme: dark)").addEventListener("change", show);
  show();
}
