;; The seed-000 coding loop: plan, write code, run the tests, let an analysis atom decide.
;;
;; An `iterative-loop` on ExecuteValidateController: the executor asks the `coder:write` tool (the
;; host registers it: the seed project used Aider) to write the code, the validator runs the test
;; command through `system:execute_shell_command`, and the controller stops when the tests pass or
;; when the analysis atom says so, else continues with the atom's next instructions.
;;
;;   loops run examples/coding_loop.sexp --set goal="Define greet(name) in greet.py" \
;;       --set test-command="python -m pytest -q"
;;
;; Inputs: `goal` (what to build), `test-command` (how to check it). From Python, pass the tool:
;;   loops.sexp.compile("examples/coding_loop.sexp", tools={"coder:write": my_coder}, workspace=...)

(defatom user:plan
  (params (goal string))
  (instructions "Plan the change for this goal: {{goal}}. Give the coder short instructions and the files to edit.")
  (returns (steps string) (files list))
  (description "Turns a goal into instructions for a coder"))

(defatom user:analyze
  (params (goal string) (steps string) (test_stdout string) (test_exit_code int) (iteration int))
  (instructions "A coder followed {{steps}} towards {{goal}} (attempt {{iteration}}). The tests printed {{test_stdout}} and exited with {{test_exit_code}}. Decide whether the goal is met; if not, write the next instructions for the coder.")
  (output_format ((type "json") (schema "StructuredAnalysisResult"))))

(define plan (user:plan (goal goal)))

(iterative-loop
  (max-iterations 3)
  (initial-input plan)
  (test-command test-command)

  (executor (lambda (current iteration)
              (log-message "attempt" iteration ":" (get-field current "steps"))
              (coder:write (prompt (get-field current "steps")) (files (get-field current "files")))))

  (validator (lambda (command iteration)
               (system:execute_shell_command (command command))))

  (controller (lambda (attempt validation current iteration)
                (let ((verdict (user:analyze (goal goal)
                                             (steps (get-field current "steps"))
                                             (test_stdout (get-field validation "stdout"))
                                             (test_exit_code (get-field validation "exit_code"))
                                             (iteration iteration))))
                  (cond ((equal? (get-field verdict "status") "FAILED") (list 'stop verdict))
                        ((get-field verdict "success") (list 'stop verdict))
                        (else (list 'continue
                                    (list (list 'steps (get-field verdict "next_input"))
                                          (list 'files (get-field current "files"))))))))))
