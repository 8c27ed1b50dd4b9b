;; The seed-000 coding loop: plan, write the code, run the tests, let an analysis atom say what next.
;;
;; An `iterative-loop` on ExecuteValidateController. The executor is an atom that writes the whole
;; file (`system:write_file` puts it in the workspace), the validator runs the test command through
;; `system:execute_shell_command`, and the controller stops when the tests pass; when they fail it
;; asks the analysis atom (the seed's StructuredAnalysisResult) for the next instructions. The tests'
;; exit code decides success, not the analysis: a model that claims success on failing tests does not
;; end the loop.
;;
;; Run it in a directory that holds the tests (here test_greet.py imports greet from greet.py), granting
;; the shell tool the one executable the test command needs:
;;
;;   loops run examples/coding_loop.sexp --workspace DIR --set goal="Define greet(name) returning 'Hello, NAME!'" \
;;       --set file=greet.py --set test-command="python -m pytest -q" --allow-executable python
;;
;; Inputs: `goal` (what the code must do), `file` (the file the executor writes), `test-command`.
;; Its value: ((status "PASSED") (file F) (iterations N)) when the tests pass; at max-iterations, the
;; last executor result (a record with `code`), with a warning.

(defatom user:plan
  (params (goal string) (file string))
  (instructions "Plan how to reach {{goal}} by writing {{file}}. Give a programmer short, concrete steps.")
  (returns (steps string))
  (description "Turns a goal into instructions for the coder"))

(defatom user:write-code
  (params (goal string) (steps string) (file string) (feedback string))
  (instructions "Write the complete contents of {{file}} so that it meets {{goal}}, following {{steps}}. {{feedback}} says what went wrong with the previous attempt (empty on the first one). Answer with the code only.")
  (returns (code string))
  (description "Writes the whole file"))

(defatom user:analyze
  (params (goal string) (steps string) (test_output string) (test_exit_code int) (iteration int))
  (instructions "A programmer followed {{steps}} towards {{goal}} (attempt {{iteration}}). The tests printed {{test_output}} and exited with {{test_exit_code}}. Explain what is wrong and write the next instructions for the programmer.")
  (output_format ((type "json") (schema "StructuredAnalysisResult")))
  (description "Reads a failing test run and says what to change"))

;; Models often fence their answer in ``` lines; the file must hold the code alone.
(define (code-lines lines)
  (cond ((null? lines) '())
        ((string-contains? (car lines) "```") (code-lines (cdr lines)))
        (else (cons (car lines) (code-lines (cdr lines))))))
(define (unfenced text) (string-join (code-lines (string-split text "\n")) "\n"))

(iterative-loop
  (max-iterations 3)
  (initial-input (list (list 'steps (get-field (user:plan (goal goal) (file file)) "steps"))
                       (list 'feedback "")))
  (test-command test-command)

  (executor (lambda (current iteration)
              (log-message "attempt" iteration ":" (get-field current "steps"))
              (let ((answer (user:write-code (goal goal) (steps (get-field current "steps")) (file file)
                                             (feedback (get-field current "feedback")))))
                (if (equal? (get-field answer "status") "FAILED")
                    answer
                    (begin (system:write_file (path file) (content (unfenced (get-field answer "code"))))
                           answer)))))

  (validator (lambda (command iteration)
               (system:execute_shell_command (command command))))

  (controller (lambda (attempt validation current iteration)
                (if (= (get-field validation "exit_code") 0)
                    (list 'stop (list (list 'status "PASSED") (list 'file file) (list 'iterations iteration)))
                    (let ((verdict (user:analyze (goal goal)
                                                 (steps (get-field current "steps"))
                                                 (test_output (string-append (get-field validation "stdout")
                                                                             (get-field validation "stderr")))
                                                 (test_exit_code (get-field validation "exit_code"))
                                                 (iteration iteration))))
                      (if (equal? (get-field verdict "status") "FAILED")
                          (list 'stop verdict)
                          (list 'continue
                                (list (list 'steps (or (get-field verdict "next_input") (get-field current "steps")))
                                      (list 'feedback (get-field verdict "analysis"))))))))))
