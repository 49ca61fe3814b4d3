//! Projects, users and their memberships.

use sqlx::FromRow;

use super::{count, Db, DbError, Page};
use crate::domain::{new_id, time::now_ms, Role};

#[derive(Debug, Clone, FromRow)]
pub struct ProjectRow {
    pub id: String,
    pub slug: String,
    pub name: String,
    pub created_at: i64,
}

#[derive(Debug, Clone, FromRow)]
pub struct UserRow {
    pub id: String,
    pub email: String,
    pub password_hash: String,
    pub created_at: i64,
}

#[derive(Debug, Clone, FromRow)]
pub struct MemberRow {
    pub user_id: String,
    pub email: String,
    pub role: String,
    pub created_at: i64,
}

#[derive(Debug, Clone, FromRow)]
pub struct ProjectWithRole {
    pub id: String,
    pub slug: String,
    pub name: String,
    pub created_at: i64,
    pub role: String,
}

impl Db {
    /// Creates a project whose admin is `admin_user_id`, in one transaction.
    pub async fn create_project(
        &self,
        slug: &str,
        name: &str,
        admin_user_id: &str,
    ) -> Result<ProjectRow, DbError> {
        let project =
            ProjectRow { id: new_id(), slug: slug.to_string(), name: name.to_string(), created_at: now_ms() };
        let mut tx = self.begin_write().await?;
        sqlx::query("INSERT INTO projects (id, slug, name, created_at) VALUES ($1, $2, $3, $4)")
            .bind(&project.id)
            .bind(&project.slug)
            .bind(&project.name)
            .bind(project.created_at)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "INSERT INTO memberships (project_id, user_id, role, created_at) VALUES ($1, $2, $3, $4)",
        )
        .bind(&project.id)
        .bind(admin_user_id)
        .bind(Role::Admin.as_str())
        .bind(project.created_at)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(project)
    }

    pub async fn project_by_slug(&self, slug: &str) -> Result<Option<ProjectRow>, DbError> {
        sqlx::query_as("SELECT id, slug, name, created_at FROM projects WHERE slug = $1")
            .bind(slug)
            .fetch_optional(self.pool())
            .await
    }

    pub async fn projects_of_user(
        &self,
        user_id: &str,
        skip: i64,
        limit: i64,
    ) -> Result<Page<ProjectWithRole>, DbError> {
        let items = sqlx::query_as(
            "SELECT p.id, p.slug, p.name, p.created_at, m.role FROM projects p \
             JOIN memberships m ON m.project_id = p.id WHERE m.user_id = $1 \
             ORDER BY p.created_at DESC, p.id DESC LIMIT $2 OFFSET $3",
        )
        .bind(user_id)
        .bind(limit)
        .bind(skip)
        .fetch_all(self.pool())
        .await?;
        let total = count(
            &sqlx::query("SELECT COUNT(*) FROM memberships WHERE user_id = $1")
                .bind(user_id)
                .fetch_one(self.pool())
                .await?,
        )?;
        Ok(Page { items, total })
    }

    pub async fn create_user(&self, email: &str, password_hash: &str) -> Result<UserRow, DbError> {
        let user = UserRow {
            id: new_id(),
            email: email.to_string(),
            password_hash: password_hash.to_string(),
            created_at: now_ms(),
        };
        sqlx::query("INSERT INTO users (id, email, password_hash, created_at) VALUES ($1, $2, $3, $4)")
            .bind(&user.id)
            .bind(&user.email)
            .bind(&user.password_hash)
            .bind(user.created_at)
            .execute(self.pool())
            .await?;
        Ok(user)
    }

    pub async fn user_by_email(&self, email: &str) -> Result<Option<UserRow>, DbError> {
        sqlx::query_as("SELECT id, email, password_hash, created_at FROM users WHERE email = $1")
            .bind(email)
            .fetch_optional(self.pool())
            .await
    }

    pub async fn user_by_id(&self, id: &str) -> Result<Option<UserRow>, DbError> {
        sqlx::query_as("SELECT id, email, password_hash, created_at FROM users WHERE id = $1")
            .bind(id)
            .fetch_optional(self.pool())
            .await
    }

    pub async fn role_in(&self, project_id: &str, user_id: &str) -> Result<Option<Role>, DbError> {
        let role: Option<(String,)> =
            sqlx::query_as("SELECT role FROM memberships WHERE project_id = $1 AND user_id = $2")
                .bind(project_id)
                .bind(user_id)
                .fetch_optional(self.pool())
                .await?;
        Ok(role.and_then(|(r,)| Role::parse_db(&r)))
    }

    /// Adds a member; a unique violation means the user is a member already.
    pub async fn add_member(&self, project_id: &str, user_id: &str, role: Role) -> Result<(), DbError> {
        sqlx::query("INSERT INTO memberships (project_id, user_id, role, created_at) VALUES ($1, $2, $3, $4)")
            .bind(project_id)
            .bind(user_id)
            .bind(role.as_str())
            .bind(now_ms())
            .execute(self.pool())
            .await
            .map(|_| ())
    }

    pub async fn member(&self, project_id: &str, user_id: &str) -> Result<Option<MemberRow>, DbError> {
        sqlx::query_as(
            "SELECT m.user_id, u.email, m.role, m.created_at FROM memberships m \
             JOIN users u ON u.id = m.user_id WHERE m.project_id = $1 AND m.user_id = $2",
        )
        .bind(project_id)
        .bind(user_id)
        .fetch_optional(self.pool())
        .await
    }

    pub async fn list_members(
        &self,
        project_id: &str,
        skip: i64,
        limit: i64,
    ) -> Result<Page<MemberRow>, DbError> {
        let items = sqlx::query_as(
            "SELECT m.user_id, u.email, m.role, m.created_at FROM memberships m \
             JOIN users u ON u.id = m.user_id WHERE m.project_id = $1 \
             ORDER BY m.created_at DESC, m.user_id DESC LIMIT $2 OFFSET $3",
        )
        .bind(project_id)
        .bind(limit)
        .bind(skip)
        .fetch_all(self.pool())
        .await?;
        let total = count(
            &sqlx::query("SELECT COUNT(*) FROM memberships WHERE project_id = $1")
                .bind(project_id)
                .fetch_one(self.pool())
                .await?,
        )?;
        Ok(Page { items, total })
    }

    /// Changes a member's role unless that would leave the project without an admin.
    /// Returns `Ok(false)` when the change was refused for that reason.
    pub async fn set_role(&self, project_id: &str, user_id: &str, role: Role) -> Result<bool, DbError> {
        let mut tx = self.begin_write().await?;
        let admins = count(
            &sqlx::query(
                "SELECT COUNT(*) FROM memberships WHERE project_id = $1 AND role = 'admin' AND user_id <> $2",
            )
            .bind(project_id)
            .bind(user_id)
            .fetch_one(&mut *tx)
            .await?,
        )?;
        if role != Role::Admin && admins == 0 {
            return Ok(false);
        }
        sqlx::query("UPDATE memberships SET role = $1 WHERE project_id = $2 AND user_id = $3")
            .bind(role.as_str())
            .bind(project_id)
            .bind(user_id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Removes a member unless they are the last admin. `Ok(false)` when refused for that reason.
    pub async fn remove_member(&self, project_id: &str, user_id: &str) -> Result<bool, DbError> {
        let mut tx = self.begin_write().await?;
        let admins = count(
            &sqlx::query(
                "SELECT COUNT(*) FROM memberships WHERE project_id = $1 AND role = 'admin' AND user_id <> $2",
            )
            .bind(project_id)
            .bind(user_id)
            .fetch_one(&mut *tx)
            .await?,
        )?;
        if admins == 0 {
            return Ok(false);
        }
        sqlx::query("DELETE FROM memberships WHERE project_id = $1 AND user_id = $2")
            .bind(project_id)
            .bind(user_id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(true)
    }
}
