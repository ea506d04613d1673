// A head script (ui/scripts.py puts it in the page's <head>): "why?" on a branch. A small chip over the corner of
// the branch button under the pointer (or focused; there "?" asks too); it presses the hidden #why-branch
// button, whose event reads the branch from window.lookaheadWhyBranch (why_branch.js).
(() => {
  let chip = null, branch = null, hiding = null;
  const explain = (button) => {
    window.lookaheadWhyBranch = Number(button.id.replace("branch-", ""));
    if (chip) chip.hidden = true;
    document.getElementById("why-branch")?.click();
  };
  const hideSoon = () => { clearTimeout(hiding); hiding = setTimeout(() => { if (chip) chip.hidden = true; }, 600); };
  const showOver = (button) => {
    if (!chip) {
      chip = document.createElement("button");
      chip.id = "branch-why";
      chip.type = "button";
      chip.textContent = "why?";
      chip.title = "What in your text makes the model want this branch's first token (or focus the branch and press ?)";
      chip.addEventListener("mouseenter", () => clearTimeout(hiding));
      chip.addEventListener("mouseleave", hideSoon);
      chip.addEventListener("click", () => explain(branch));
      document.body.appendChild(chip);
    }
    clearTimeout(hiding);
    branch = button;
    const box = button.getBoundingClientRect();
    chip.style.left = `${box.right + window.scrollX - 34}px`;
    chip.style.top = `${box.top + window.scrollY - 12}px`;
    chip.hidden = false;
  };
  const branchOf = (e) => e.target.closest && e.target.closest(".branch-btn");
  document.addEventListener("mouseover", (e) => { if (branchOf(e)) showOver(branchOf(e)); });
  document.addEventListener("focusin", (e) => { if (branchOf(e)) showOver(branchOf(e)); });
  document.addEventListener("mouseout", (e) => { if (branchOf(e)) hideSoon(); });
  document.addEventListener("keydown", (e) => {
    if (e.key === "?" && branchOf(e)) { explain(branchOf(e)); e.preventDefault(); }
  });
})();
